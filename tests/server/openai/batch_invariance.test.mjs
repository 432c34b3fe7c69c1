// Batch invariance end to end: 64 concurrent greedy requests with mixed prompt lengths against a
// server whose KV pool is small enough to force preemptions; each output equals the same request
// run alone; afterwards every block is free (read from /metrics).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, metrics, waitAllBlocksFree } from './helpers.mjs';

const words = ['cat', 'dog', 'park', 'ball', 'Lily', 'Ben', 'happy', 'tree', 'sun', 'big', 'red', 'run',
  'jump', 'play', 'mom', 'day', 'toy', 'friend', 'sad', 'bird'];

function prompt(i) {
  let s = 'Once upon a time';
  let x = (i * 2654435761) % 4294967296;
  const n = 1 + (i * 7) % 60;  // 1..60 extra words
  for (let k = 0; k < n; k++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    s += ' ' + words[x % words.length];
  }
  return s;
}

async function complete(url, p) {
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'stories260K', prompt: p, max_tokens: 24, temperature: 0, ignore_eos: true }),
  });
  assert.equal(r.status, 200, await r.clone().text());
  const j = await r.json();
  return j.choices[0].text;
}

test('64 concurrent requests with preemption equal each request alone; all blocks freed', async () => {
  // 24 blocks x 16 tokens = 384 tokens of KV for 64 requests of up to ~90 tokens each.
  const server = await startServer(['--kv-cache-memory', '24blocks', '--max-num-seqs', '64',
    '--max-num-batched-tokens', '256', '--max-waiting', '256']);
  try {
    const prompts = Array.from({ length: 64 }, (_, i) => prompt(i));
    const together = await Promise.all(prompts.map((p) => complete(server.url, p)));
    const m = await waitAllBlocksFree(server.url);
    assert.ok(m['pagellm:num_preemptions_total'] > 0, 'the small pool should force preemptions');
    for (let i = 0; i < prompts.length; i++) {
      const alone = await complete(server.url, prompts[i]);
      assert.equal(together[i], alone, `request ${i} differs when batched`);
    }
    const after = await waitAllBlocksFree(server.url);
    assert.equal(after['pagellm:num_free_blocks'], 24);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});
