// Streaming: multi-byte characters never split (random-weight model with the full llama SPM vocab,
// so byte-fallback tokens occur), stop strings that span tokens or end inside a token, stream ==
// non-stream, and a client that disconnects mid-stream gets its blocks freed.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { startServer, makeRandomModel, waitAllBlocksFree, metrics } from './helpers.mjs';

let server;
let modelPath;
before(async () => {
  modelPath = makeRandomModel();
  server = await startServer([], { model: modelPath, name: 'tiny' });
});
after(async () => {
  assert.equal(await server.stop(), 0);
  fs.rmSync(modelPath, { force: true });
});

// Reads an SSE response as raw bytes; returns the decoded `text` deltas, failing on any delta
// whose bytes are not valid UTF-8.
async function streamDeltas(body) {
  const r = await fetch(`${server.url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }),
  });
  assert.equal(r.status, 200);
  const bytes = Buffer.from(await r.arrayBuffer());
  const strict = new TextDecoder('utf-8', { fatal: true });
  const text = strict.decode(bytes);  // the whole stream is valid UTF-8
  const deltas = [];
  let done = false;
  for (const event of text.split('\n\n')) {
    if (!event.startsWith('data: ')) continue;
    const data = event.slice(6);
    if (data === '[DONE]') { done = true; continue; }
    const j = JSON.parse(data);
    if (j.choices?.length) deltas.push({ text: j.choices[0].text, finish: j.choices[0].finish_reason });
  }
  assert.ok(done, 'stream ends with data: [DONE]');
  return deltas;
}

async function whole(body) {
  const r = await fetch(`${server.url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  assert.equal(r.status, 200);
  return (await r.json()).choices[0];
}

test('multi-byte characters are never split and stream == non-stream', async () => {
  let sawMultibyte = false;
  for (let seed = 1; seed <= 6; seed++) {
    const body = { model: 'tiny', prompt: 'Hello', max_tokens: 64, temperature: 1.0, seed, ignore_eos: true };
    const deltas = await streamDeltas(body);
    for (const d of deltas) {
      assert.ok(!d.text.includes('\uFFFD'), `delta with a replacement character: ${JSON.stringify(d.text)}`);
      if (/[^\x00-\x7f]/.test(d.text)) sawMultibyte = true;
    }
    const w = await whole(body);
    assert.equal(deltas.map((d) => d.text).join(''), w.text);
  }
  assert.ok(sawMultibyte, 'the random model should produce some multi-byte characters');
});

test('stop strings spanning tokens or ending inside a token are never emitted', async () => {
  const base = { model: 'tiny', prompt: 'Hello', max_tokens: 64, temperature: 1.0, seed: 3, ignore_eos: true };
  const full = (await whole(base)).text;
  assert.ok(full.length > 12);
  // Pick stop strings from the middle of the known text: they span token boundaries or end inside one.
  for (const [a, b] of [[5, 9], [7, 8], [3, 11]]) {
    const stop = full.slice(a, b);
    const cut = full.indexOf(stop);
    const deltas = await streamDeltas({ ...base, stop: [stop] });
    const streamed = deltas.map((d) => d.text).join('');
    assert.equal(streamed, full.slice(0, cut), `stop ${JSON.stringify(stop)}`);
    assert.equal(deltas.at(-1).finish, 'stop');
    const w = await whole({ ...base, stop: [stop] });
    assert.equal(w.text, streamed);
    assert.equal(w.finish_reason, 'stop');
  }
});

test('a client that disconnects mid-stream gets its blocks back', async () => {
  const ctl = new AbortController();
  const r = await fetch(`${server.url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, signal: ctl.signal,
    body: JSON.stringify({ model: 'tiny', prompt: 'Hello', max_tokens: 30000, temperature: 1.0, ignore_eos: true,
      stream: true }),
  });
  const reader = r.body.getReader();
  await reader.read();
  await reader.read();
  const busy = await metrics(server.url);
  assert.ok(busy['pagellm:num_free_blocks'] < busy['pagellm:num_blocks'], 'the request holds blocks');
  ctl.abort();
  await waitAllBlocksFree(server.url, 3000);
  // The server keeps serving.
  assert.equal((await whole({ model: 'tiny', prompt: 'Hi', max_tokens: 2 })).text.length >= 0, true);
});
