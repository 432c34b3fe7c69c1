// Shared helpers: start `pagellm serve` on a free port, wait for /health, read /metrics.
import { spawn, execFileSync } from 'node:child_process';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, '../../..');
export const bin = process.env.PAGELLM_BIN ?? path.join(repoRoot, 'build/pagellm');
export const bundledModel = path.join(repoRoot, 'models/stories260K-f32.gguf');
export const testdata = process.env.PAGELLM_TESTDATA_DIR ?? path.resolve(repoRoot, '../shared/testdata');

export async function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

// Starts the server; resolves once /health answers 200. Returns { url, proc, stop(), log() }.
export async function startServer(args = [], { model = bundledModel, name = 'stories260K' } = {}) {
  const port = await freePort();
  const proc = spawn(bin, ['serve', '-m', model, '--host', '127.0.0.1', '--port', String(port),
    '--served-model-name', name, '--threads', '2', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout.on('data', (d) => { out += d; });
  proc.stderr.on('data', (d) => { out += d; });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`server exited early (${proc.exitCode}):\n${out}`);
    try {
      const r = await fetch(`${url}/health`);
      if (r.status === 200) break;
    } catch { /* not up yet */ }
    if (Date.now() > deadline) { proc.kill('SIGKILL'); throw new Error(`server did not start:\n${out}`); }
    await new Promise((r) => setTimeout(r, 50));
  }
  const stop = async () => {
    if (proc.exitCode !== null) return proc.exitCode;
    const done = new Promise((r) => proc.on('exit', (code) => r(code)));
    proc.kill('SIGTERM');
    const timer = setTimeout(() => proc.kill('SIGKILL'), 15000);
    const code = await done;
    clearTimeout(timer);
    return code;
  };
  return { url, proc, stop, log: () => out };
}

// Parses Prometheus text into { 'name{labels}': value, name: value (first sample) }.
export async function metrics(url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const sp = line.lastIndexOf(' ');
    const key = line.slice(0, sp);
    const value = Number(line.slice(sp + 1));
    m[key] = value;
    const bare = key.replace(/\{.*$/, '');
    if (!(bare in m)) m[bare] = value;
  }
  return m;
}

// Polls until every KV block is free again (or throws after timeoutMs).
export async function waitAllBlocksFree(url, timeoutMs = 5000) {
  const deadline = Date.now() + timeoutMs;
  let m;
  for (;;) {
    m = await metrics(url);
    if (m['pagellm:num_free_blocks'] === m['pagellm:num_blocks'] && m['pagellm:num_requests_running'] === 0) return m;
    if (Date.now() > deadline) {
      throw new Error(`blocks not freed: ${m['pagellm:num_free_blocks']} of ${m['pagellm:num_blocks']} free`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

// Writes a random-weight tiny model with the full llama SPM vocabulary (byte-fallback tokens
// included) into a temporary file and returns its path.
export function makeRandomModel() {
  const out = path.join(os.tmpdir(), `pagellm-tiny-gqa-${process.pid}.gguf`);
  execFileSync(bin, ['make-model', '--shape', 'tiny-gqa', '--dtype', 'f32', '--seed', '7', '--context', '32768', '--vocab',
    path.join(testdata, 'vocab/ggml-vocab-llama-spm.gguf'), '-o', out], { stdio: 'ignore' });
  return out;
}
