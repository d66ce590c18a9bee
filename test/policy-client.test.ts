import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  PolicyResponseError,
  PolicyUnavailableError,
  createPolicyClient,
  parseCompletionResponse,
} from '../lib/policy-client.ts';

// A real HTTP server whose answer depends on the `model` field of the request.
let server: http.Server;
let baseUrl = '';
const seen: { path: string; body: any }[] = [];
let flaky = 0;

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
      if (req.url === '/update_weights_from_disk') return json(200, { success: true });
      switch (body.model) {
        case 'ids':
          return json(200, {
            choices: [{ text: 'RD', finish_reason: 'stop', token_ids: [5, 6, 2], logprobs: { tokens: ['token_id:5', 'token_id:6', 'token_id:2'], token_logprobs: [-0.5, -1.25, -0.01] } }],
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
  await assert.rejects(c.servedCheckpoint(), PolicyUnavailableError);
});

test('loadWeights and servedCheckpoint', async () => {
  const c = createPolicyClient({ baseUrl: baseUrl + '/', retries: 0 });
  await c.loadWeights('/ckpt/4', 4);
  assert.deepEqual(seen.at(-1), { path: '/update_weights_from_disk', body: { model_path: '/ckpt/4', checkpoint: 4 } });
  assert.equal(await c.servedCheckpoint(), 3);
});
