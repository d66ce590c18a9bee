import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { validateConfig } from '../../lib/config.ts';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { isAbsolute, join, relative, resolve } from 'node:path';
import { PolicyResponseError, PolicyUnavailableError } from '../../lib/policy/http.ts';
import { createPolicyClient, parseCompletionResponse } from '../../lib/policy/completions.ts';
import { weightVersion, servesCheckpoint } from '../../lib/policy/weight-sync.ts';

// A real HTTP server whose answer depends on the `model` field of the request.
let server: http.Server;
let baseUrl = '';
const seen: { path: string; body: any }[] = [];
let flaky = 0;
/** SGLang's model_path: the model it was started with, then each directory /update_weights_from_disk loaded */
let sglangPath = 'Qwen/Qwen3-0.6B';
let noModelInfo = false;

before(async () => {
  server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (c) => (raw += c));
    req.on('end', () => {
      const body = raw ? JSON.parse(raw) : undefined;
      seen.push({ path: req.url!, body });
      const json = (status: number, x: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(typeof x === 'string' ? x : JSON.stringify(x));
      };
      if (req.url === '/health') return json(200, { status: 'ok', checkpoint: 3 });
      if (req.url === '/get_model_info') {
        return noModelInfo ? json(404, { detail: 'Not Found' }) : json(200, { model_path: sglangPath, tokenizer_path: sglangPath, is_generation: true });
      }
      if (req.url === '/update_weights_from_disk') {
        sglangPath = body.model_path;
        return json(200, { success: true });
      }
      switch (body.model) {
        case 'ids':
          return json(200, {
            choices: [
              { text: 'RD', finish_reason: 'stop', token_ids: [5, 6, 2], logprobs: { tokens: ['token_id:5', 'token_id:6', 'token_id:2'], token_logprobs: [-0.5, -1.25, -0.01] } },
            ],
          });
        case 'strings':
          return json(200, {
            choices: [{ text: 'R', finish_reason: 'length', logprobs: { tokens: ['token_id:7', 'token_id:8'], token_logprobs: [-0.1, -0.2] } }],
          });
        case 'garbage':
          return json(200, { hello: 'world' });
        case 'notjson':
          return json(200, '<html>oops</html>');
        case 'bad-request':
          return json(400, { error: 'prompt too long' });
        case 'flaky':
          if (flaky++ < 2) return json(503, { error: 'loading' });
          return json(200, { choices: [{ finish_reason: 'stop', token_ids: [1], logprobs: { token_logprobs: [-0.3] } }] });
        case 'down':
          return json(500, { error: 'boom' });
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(() => server.close());

const req = { promptIds: [1, 2, 3], maxTokens: 4, temperature: 1, topP: 1, seed: 9, stopIds: [2] };

test('sends the vLLM request shape and reads token_ids', async () => {
  const c = createPolicyClient({ baseUrl, model: 'ids', retries: 0 });
  const r = await c.complete({ ...req, allowedIds: [5, 6, 7] });
  assert.deepEqual(r, { ids: [5, 6, 2], logprobs: [-0.5, -1.25, -0.01], finishReason: 'stop' });
  const body = seen.at(-1)!.body;
  assert.equal(seen.at(-1)!.path, '/v1/completions');
  assert.deepEqual(body.prompt, [1, 2, 3]);
  assert.equal(body.max_tokens, 4);
  assert.equal(body.temperature, 1);
  assert.equal(body.top_p, 1);
  assert.equal(body.seed, 9);
  assert.deepEqual(body.stop_token_ids, [2]);
  assert.deepEqual(body.allowed_token_ids, [5, 6, 7]);
  assert.equal(body.return_tokens_as_token_ids, true);
  assert.ok(body.logprobs >= 0);
});

test('parses token_id:N strings when token_ids are absent', async () => {
  const c = createPolicyClient({ baseUrl, model: 'strings', retries: 0 });
  assert.deepEqual(await c.complete(req), { ids: [7, 8], logprobs: [-0.1, -0.2], finishReason: 'length' });
});

test('garbage responses give a clear PolicyResponseError', async () => {
  await assert.rejects(createPolicyClient({ baseUrl, model: 'garbage', retries: 0 }).complete(req), (e: Error) => {
    assert.ok(e instanceof PolicyResponseError);
    assert.match(e.message, /unexpected completion: choices/);
    return true;
  });
  await assert.rejects(createPolicyClient({ baseUrl, model: 'notjson', retries: 0 }).complete(req), /non-JSON/);
  await assert.rejects(createPolicyClient({ baseUrl, model: 'bad-request', retries: 3 }).complete(req), (e: Error) => {
    assert.ok(e instanceof PolicyResponseError && !(e instanceof PolicyUnavailableError));
    assert.match(e.message, /HTTP 400.*prompt too long/);
    return true;
  });
  assert.throws(() => parseCompletionResponse({ choices: [{ logprobs: { tokens: ['hello'], token_logprobs: [-1] } }] }), /expected "token_id:N"/);
  assert.throws(() => parseCompletionResponse({ choices: [{ token_ids: [1, 2], logprobs: { token_logprobs: [-1] } }] }), /2 tokens but 1 log-probs/);
});

test('5xx is retried, then succeeds', async () => {
  flaky = 0;
  const c = createPolicyClient({ baseUrl, model: 'flaky', retries: 3, backoffMs: 1 });
  assert.deepEqual(await c.complete(req), { ids: [1], logprobs: [-0.3], finishReason: 'stop' });
  assert.equal(flaky, 3);
});

test('persistent 5xx and a closed port end in PolicyUnavailableError', async () => {
  const n = seen.length;
  await assert.rejects(createPolicyClient({ baseUrl, model: 'down', retries: 2, backoffMs: 1 }).complete(req), (e: Error) => {
    assert.ok(e instanceof PolicyUnavailableError);
    assert.match(e.message, /after 3 attempts: HTTP 500/);
    return true;
  });
  assert.equal(seen.length - n, 3);

  const closed = http.createServer();
  await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
  const port = (closed.address() as AddressInfo).port;
  await new Promise((r) => closed.close(r));
  const c = createPolicyClient({ baseUrl: `http://127.0.0.1:${port}`, retries: 2, backoffMs: 1 });
  await assert.rejects(c.complete(req), (e: Error) => {
    assert.ok(e instanceof PolicyUnavailableError);
    assert.match(e.message, /after 3 attempts: .*ECONNREFUSED/);
    return true;
  });
  await assert.rejects(c.servedModel(), PolicyUnavailableError);
});

test("SGLang: loadWeights, then get_model_info names the directory served, which tells two runs' checkpoint 4 apart", async () => {
  const c = createPolicyClient({ baseUrl: baseUrl + '/', retries: 0 });
  const fresh = await c.servedModel();
  assert.deepEqual(fresh, { checkpoint: null, path: 'Qwen/Qwen3-0.6B' });
  assert.equal(servesCheckpoint(fresh, '/store/runs/a/ckpt/4', 4), false);
  await c.loadWeights('/store/runs/a/ckpt/4', 4);
  assert.deepEqual(seen.at(-1), { path: '/update_weights_from_disk', body: { model_path: '/store/runs/a/ckpt/4', checkpoint: 4 } });
  const served = await c.servedModel();
  assert.equal(servesCheckpoint(served, '/store/runs/a/ckpt/4', 4), true);
  assert.equal(servesCheckpoint(served, '/store/runs/a/ckpt/4/', 4), true, 'the same directory spelled with a slash');
  assert.equal(servesCheckpoint(served, '/store/runs/b/ckpt/4', 4), false, "run b's checkpoint 4 is another model");
  // a server without /get_model_info: the index from /health, no directory to compare
  noModelInfo = true;
  try {
    const old = await c.servedModel();
    assert.deepEqual(old, { checkpoint: 3, path: null });
    assert.equal(servesCheckpoint(old, '/anywhere/3', 3), true);
  } finally {
    noModelInfo = false;
  }
});

// vLLM's weight-transfer HTTP contract with the `disk` backend of an unreleased vLLM (draft PR vllm-project/vllm#52152;
// released vLLM has no such backend: test/docker/vllm-training.test.ts runs the real 0.32 and its reload_weights path) as a
// loopback server that records every request and answers as that vLLM does: 400 for a missing init_info/update_info,
// 422 for a bad pause mode, 500 for what the engine raises (a second session, an update outside a session, a path that
// is not an absolute directory of safetensors). Its /server_info reports the backend, which is what makes swerl use it.
function vllmContractServer() {
  const log: { method: string; url: string; body: unknown; paused: boolean }[] = [];
  const state = { paused: false, inited: false, session: false, loaded: null as string | null, version: null as string | null, devMode: true };
  const srv = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (c) => (raw += c));
    req.on('end', () => {
      const url = new URL(req.url!, 'http://x');
      let body: any;
      try {
        body = raw ? JSON.parse(raw) : undefined;
      } catch {
        body = Symbol.for('bad json');
      }
      log.push({ method: req.method!, url: req.url!, body, paused: state.paused });
      const json = (status: number, x: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(x));
      };
      const engineError = (detail: string) => json(500, { detail });
      const route = `${req.method} ${url.pathname}`;
      if (!state.devMode && route !== 'GET /health') return json(404, { detail: 'Not Found' });
      switch (route) {
        case 'POST /pause': {
          const mode = url.searchParams.get('mode') ?? 'abort';
          if (!['abort', 'wait', 'keep'].includes(mode)) return json(422, { detail: [{ loc: ['query', 'mode'], msg: "Input should be 'abort', 'wait' or 'keep'" }] });
          state.paused = true;
          return json(200, { status: 'paused' });
        }
        case 'POST /resume':
          state.paused = false;
          return json(200, { status: 'resumed' });
        case 'POST /init_weight_transfer_engine':
          if (typeof body !== 'object' || body === null) return json(400, { detail: 'Invalid JSON format' });
          if (body.init_info == null) return json(400, { detail: "Missing 'init_info' in request body" });
          if (Object.keys(body.init_info).length) return engineError('DiskWeightTransferInitInfo takes no fields');
          state.inited = true;
          return json(200, { message: 'Weight transfer initialized' });
        case 'POST /start_weight_update':
          if (!state.inited) return engineError('weight transfer engine not initialized');
          if (state.session) return engineError('A shared-disk weight update is already active');
          [state.session, state.loaded] = [true, null];
          return json(200, { message: 'Weight update started' });
        case 'POST /update_weights': {
          if (typeof body !== 'object' || body === null) return json(400, { detail: 'Invalid JSON format' });
          if (body.update_info == null) return json(400, { detail: "Missing 'update_info' in request body" });
          const path = body.update_info.path;
          const abort = (d: string) => ((state.session = false), engineError(d));
          if (!state.session) return abort('start_weight_update must be called before loading a checkpoint');
          if (state.loaded) return abort('The disk backend accepts exactly one checkpoint per update session');
          if (typeof path !== 'string' || !isAbsolute(path)) return abort('`path` must be an absolute local directory');
          if (!existsSync(path) || !readdirSync(path).some((f) => f.endsWith('.safetensors')))
            return abort(`Shared-disk checkpoint directory contains no safetensors files: ${path}`);
          state.loaded = path;
          return json(200, { message: 'Weights updated' });
        }
        case 'POST /finish_weight_update': {
          if (!state.session) return engineError('No shared-disk weight update is active');
          state.session = false;
          if (!state.loaded) return engineError('No checkpoint was loaded during the shared-disk update session');
          if (body?.weight_version != null) state.version = String(body.weight_version);
          return json(200, { message: 'Weight update finished' });
        }
        case 'GET /weight_info':
          return json(200, { weight_version: state.version });
        case 'GET /server_info':
          return json(200, {
            vllm_config: {
              model_config: { dtype: 'torch.float32', hf_overrides: {}, served_model_name: 'policy', max_model_len: 4096 },
              weight_transfer_config: { backend: 'disk' },
            },
          });
        default:
          return json(404, { detail: 'Not Found' });
      }
    });
  });
  return { srv, log, state };
}

test('vLLM weight sync: the documented disk-backend sequence, paused around it; weight_info gives the checkpoint back', async () => {
  const { srv, log, state } = vllmContractServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
  const root = mkdtempSync(join(tmpdir(), 'vllm-sync-'));
  try {
    const ckpt = (n: number, files = ['model.safetensors', 'config.json']) => {
      const d = join(root, 'ckpt', String(n));
      mkdirSync(d, { recursive: true });
      for (const f of files) writeFileSync(join(d, f), '{}');
      return d;
    };
    const v = validateConfig({ policy: { baseUrl: url, weightSync: 'tgi' } });
    assert.match(v.ok ? '' : v.errors.join(), /config.policy.weightSync: must be one of "sglang", "vllm", got "tgi"/);
    const c = createPolicyClient({ baseUrl: url, weightSync: 'vllm', retries: 2, backoffMs: 1 });
    assert.equal((await c.servedModel()).checkpoint, null, 'a fresh server serves no checkpoint of ours');

    const dir = ckpt(4, ['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors', 'model.safetensors.index.json']);
    await c.loadWeights(dir, 4);
    assert.deepEqual(
      log.map((l) => [l.method, l.url, l.body, l.paused]),
      [
        ['GET', '/weight_info', undefined, false],
        ['GET', '/server_info?config_format=json', undefined, false],
        ['POST', '/pause?mode=wait', undefined, false],
        ['POST', '/init_weight_transfer_engine', { init_info: {} }, true],
        ['POST', '/start_weight_update', undefined, true],
        ['POST', '/update_weights', { update_info: { path: dir } }, true],
        ['POST', '/finish_weight_update', { weight_version: weightVersion(dir, 4) }, true],
        ['POST', '/resume', undefined, true],
      ],
    );
    assert.deepEqual([state.paused, state.session, state.version], [false, false, weightVersion(dir, 4)]);
    assert.deepEqual(await c.servedModel(), { checkpoint: 4, path: dir });

    // a relative directory is sent absolute (the server resolves nothing against our working directory)
    log.length = 0;
    const rel = relative(process.cwd(), ckpt(5));
    await c.loadWeights(rel, 5);
    assert.deepEqual(log.find((l) => l.url === '/update_weights')!.body, { update_info: { path: resolve(rel) } });
    assert.equal((await c.servedModel()).checkpoint, 5);

    // the engine refuses the checkpoint: the sync fails with vLLM's reason, generation resumes, the old version stays
    log.length = 0;
    const empty = ckpt(6, ['config.json']);
    await assert.rejects(c.loadWeights(empty, 6), /update_weights unavailable after 1 attempts: HTTP 500: .*contains no safetensors files/);
    assert.deepEqual(
      log.map((l) => l.url),
      ['/server_info?config_format=json', '/pause?mode=wait', '/init_weight_transfer_engine', '/start_weight_update', '/update_weights', '/resume'],
      'one attempt per step, then resume',
    );
    assert.deepEqual([state.paused, state.session], [false, false]);
    assert.equal((await c.servedModel()).checkpoint, 5);

    // a session an interrupted sync left open is closed, and the sync goes through
    await fetch(`${url}/start_weight_update`, { method: 'POST' });
    assert.equal(state.session, true);
    log.length = 0;
    await c.loadWeights(ckpt(7), 7);
    assert.deepEqual(
      log.map((l) => l.url),
      [
        '/server_info?config_format=json',
        '/pause?mode=wait',
        '/init_weight_transfer_engine',
        '/start_weight_update',
        '/finish_weight_update',
        '/start_weight_update',
        '/update_weights',
        '/finish_weight_update',
        '/resume',
      ],
    );
    assert.equal((await c.servedModel()).checkpoint, 7);

    // a vLLM without its development endpoints: the error says how to start it
    state.devMode = false;
    await assert.rejects(
      c.loadWeights(ckpt(8), 8),
      (e: Error) => e instanceof PolicyResponseError && /GET \/server_info is not served \(404\): start vLLM with VLLM_SERVER_DEV_MODE=1/.test(e.message),
    );
  } finally {
    srv.close();
    rmSync(root, { recursive: true, force: true });
  }
});

test('SGLang weight sync: update_weights_from_disk {model_path}; its 400 {success: false, message} is an error with the message', async () => {
  const got: unknown[] = [];
  const srv = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (c) => (raw += c));
    req.on('end', () => {
      const body = JSON.parse(raw);
      got.push([req.method, req.url, body]);
      const ok = typeof body.model_path === 'string' && body.model_path.endsWith('/good');
      res.writeHead(ok ? 200 : 400, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify(
          ok ? { success: true, message: 'Succeeded to update model weights.', num_paused_requests: 0 } : { success: false, message: `Failed to load ${body.model_path}` },
        ),
      );
    });
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  try {
    const c = createPolicyClient({ baseUrl: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`, retries: 0 });
    await c.loadWeights('/ckpt/good', 2);
    await assert.rejects(c.loadWeights('/ckpt/bad', 3), (e: Error) => e instanceof PolicyResponseError && /HTTP 400: .*Failed to load \/ckpt\/bad/.test(e.message));
    assert.deepEqual(got, [
      ['POST', '/update_weights_from_disk', { model_path: '/ckpt/good', checkpoint: 2 }],
      ['POST', '/update_weights_from_disk', { model_path: '/ckpt/bad', checkpoint: 3 }],
    ]);
  } finally {
    srv.close();
  }
});
