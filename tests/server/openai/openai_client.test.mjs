// The official `openai` npm client, unmodified, against `pagellm serve` on the bundled model:
// completions and chat, streaming and not, n=2, stop, seed, logprobs, models, errors.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer } from './helpers.mjs';

let server;
let client;
const model = 'stories260K';
// llama.cpp's greedy continuation of "Once upon a time" on this model (../shared/testdata).
const greedyStart = ', there was a little girl named Lily.';

before(async () => {
  server = await startServer();
  client = new OpenAI({ apiKey: 'unused', baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 60000 });
});
after(async () => {
  assert.equal(await server.stop(), 0, 'server exits 0 on SIGTERM');
});

test('models.list names the served model', async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [model]);
});

test('completions: greedy text, usage, finish_reason', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 20, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].index, 0);
  assert.ok(r.choices[0].text.startsWith(greedyStart), r.choices[0].text);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.prompt_tokens, 5);
  assert.equal(r.usage.completion_tokens, 20);
  assert.equal(r.usage.total_tokens, 25);
});

test('completions: stream deltas concatenate to the non-streamed text', async () => {
  const req = { model, prompt: 'Lily and Ben', max_tokens: 40, temperature: 0.8, seed: 11 };
  const whole = await client.completions.create(req);
  const stream = await client.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.choices.length > 0) {
      text += chunk.choices[0].text;
      if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.deepEqual(usage, whole.usage);
});

test('chat: non-stream and stream agree, role set', async () => {
  const req = { model, messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 30, temperature: 0 };
  const whole = await client.chat.completions.create(req);
  assert.equal(whole.object, 'chat.completion');
  assert.match(whole.id, /^chatcmpl-/);
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.ok(whole.choices[0].message.content.length > 0);
  const stream = await client.chat.completions.create({ ...req, stream: true });
  let text = '';
  let role = null;
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta ?? {};
    if (d.role) role = d.role;
    text += d.content ?? '';
  }
  assert.equal(role, 'assistant');
  assert.equal(text, whole.choices[0].message.content);
});

test('n=2 returns two indexed choices; the same seed repeats them', async () => {
  const req = { model, prompt: 'The cat sat', max_tokens: 16, temperature: 1.0, n: 2, seed: 5 };
  const a = await client.completions.create(req);
  const b = await client.completions.create(req);
  assert.deepEqual(a.choices.map((c) => c.index).sort(), [0, 1]);
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
  assert.equal(a.usage.completion_tokens, 32);
});

test('seed: same seed same text, other seed other text', async () => {
  const req = { model, prompt: 'Once upon a time', max_tokens: 32, temperature: 1.0, seed: 1234 };
  const a = await client.completions.create(req);
  const b = await client.completions.create(req);
  const c = await client.completions.create({ ...req, seed: 4321 });
  assert.equal(a.choices[0].text, b.choices[0].text);
  assert.notEqual(a.choices[0].text, c.choices[0].text);
});

test('stop strings end the text before the stop string', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 40, temperature: 0,
    stop: ['Lily'] });
  assert.equal(r.choices[0].text, ', there was a little girl named ');
  assert.equal(r.choices[0].finish_reason, 'stop');
  const c = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }],
    max_tokens: 40, temperature: 0, stop: ['e'] });
  assert.ok(!c.choices[0].message.content.includes('e'));
});

test('logprobs: completions (legacy integer) and chat (top_logprobs)', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 5, temperature: 0,
    logprobs: 2 });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 5);
  assert.equal(lp.token_logprobs.length, 5);
  assert.equal(lp.top_logprobs.length, 5);
  for (let i = 0; i < 5; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    const top = Object.values(lp.top_logprobs[i]);
    assert.equal(top.length, 2);
    assert.ok(Math.max(...top) >= lp.token_logprobs[i] - 1e-6, 'greedy token is the top one');
  }
  const c = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }],
    max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 3 });
  const content = c.choices[0].logprobs.content;
  assert.equal(content.length, c.usage.completion_tokens);
  for (const t of content) {
    assert.equal(typeof t.token, 'string');
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    assert.equal(t.top_logprobs[0].logprob, t.logprob);  // greedy: chosen = most likely
  }
});

test('bad requests raise typed errors and the server keeps serving', async () => {
  await assert.rejects(client.completions.create({ model, prompt: 'x', max_tokens: -1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400);
  await assert.rejects(client.completions.create({ model, prompt: 'x', temperature: -0.5 }),
    (e) => e.status === 400 && /temperature/.test(e.message));
  await assert.rejects(client.completions.create({ model: 'nope', prompt: 'x' }), (e) => e.status >= 400 && e.status < 500);
  const ok = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 3, temperature: 0 });
  assert.equal(ok.usage.completion_tokens, 3);
});
