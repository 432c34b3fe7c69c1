// Prefix caching and shared blocks through the server: two chat requests with the same 512-token
// system prompt (the second computes only its suffix), cache_salt isolation, best_of, and
// --no-prefix-caching.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import OpenAI from 'openai';
import { startServer, makeRandomModel, metrics, waitAllBlocksFree } from './helpers.mjs';

let modelPath;
before(() => { modelPath = makeRandomModel(); });
after(() => fs.rmSync(modelPath, { force: true }));

// A system prompt of exactly `n` tokens, checked through /tokenize.
async function systemPromptOf(url, n) {
  const words = [];
  for (let i = 0; words.length < n; i++) words.push(['alpha', 'beta', 'gamma', 'delta', 'omega'][i % 5] + (i % 97));
  let text = words.join(' ');
  for (;;) {
    const r = await (await fetch(`${url}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: text, add_special_tokens: false }) })).json();
    if (typeof r.count !== 'number') throw new Error(`/tokenize answered ${JSON.stringify(r)}`);
    if (r.count <= n) return text;
    text = text.slice(0, text.lastIndexOf(' '));
  }
}

test('same 512-token system prompt: the second request computes only its suffix', async () => {
  const server = await startServer([], { model: modelPath, name: 'tiny' });
  try {
    const client = new OpenAI({ apiKey: 'x', baseURL: `${server.url}/v1`, maxRetries: 0 });
    const system = await systemPromptOf(server.url, 512);
    const ask = (q, extra = {}) => client.chat.completions.create({ model: 'tiny', max_tokens: 4, temperature: 0,
      messages: [{ role: 'system', content: system }, { role: 'user', content: q }], ...extra });
    const first = await ask('What is the first question?');
    assert.equal(first.usage.prompt_tokens_details.cached_tokens, 0);
    assert.ok(first.usage.prompt_tokens > 512);
    const before = await metrics(server.url);
    const second = await ask('And this one is different.');
    const after = await metrics(server.url);
    const cached = second.usage.prompt_tokens_details.cached_tokens;
    // Everything up to the last full 16-token block of the shared part is reused.
    assert.ok(cached >= 512 - 16, `cached_tokens ${cached}`);
    assert.ok(cached < second.usage.prompt_tokens);
    assert.equal(after['pagellm:prefix_cache_hits_total'] - before['pagellm:prefix_cache_hits_total'], cached);
    // Another tenant's salt shares nothing.
    const salted = await ask('What is the first question?', { cache_salt: 'tenant-b' });
    assert.equal(salted.usage.prompt_tokens_details.cached_tokens, 0);
    // Cold and warm agree.
    const again = await ask('What is the first question?');
    assert.equal(again.choices[0].message.content, first.choices[0].message.content);
    assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0);
    await waitAllBlocksFree(server.url);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('best_of returns the n most likely of best_of samples; n > 1 shares the prompt', async () => {
  const server = await startServer([], { model: modelPath, name: 'tiny' });
  try {
    const body = { model: 'tiny', prompt: 'Hello there', max_tokens: 8, temperature: 1.0, seed: 3, ignore_eos: true };
    const r = await (await fetch(`${server.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...body, n: 2, best_of: 5, logprobs: 0 }) })).json();
    assert.equal(r.choices.length, 2);
    assert.equal(r.usage.completion_tokens, 5 * 8);  // every sampled sequence is billed
    // The kept choices are the most likely among the 5 sequences with seeds 3..7.
    const sums = [];
    for (let j = 0; j < 5; j++) {
      const one = await (await fetch(`${server.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ ...body, seed: 3 + j, logprobs: 0 }) })).json();
      sums.push({ text: one.choices[0].text, lp: one.choices[0].logprobs.token_logprobs.reduce((a, b) => a + b, 0) });
    }
    sums.sort((a, b) => b.lp - a.lp);
    assert.deepEqual(r.choices.map((c) => c.text), sums.slice(0, 2).map((s) => s.text));
    await waitAllBlocksFree(server.url);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('--no-prefix-caching: nothing is reused', async () => {
  const server = await startServer(['--no-prefix-caching'], { model: modelPath, name: 'tiny' });
  try {
    const body = { model: 'tiny', prompt: 'Hello '.repeat(60), max_tokens: 2, temperature: 0 };
    for (let i = 0; i < 2; i++) {
      const r = await (await fetch(`${server.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })).json();
      assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
    }
    const m = await metrics(server.url);
    assert.equal(m['pagellm:prefix_cache_hits_total'], 0);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});
