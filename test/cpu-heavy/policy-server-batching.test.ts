// The policy server's continuous batching (policy-server/scheduler.ts over gpu-learner's BatchDecoder), through
// real HTTP against real Learners on tiny preset checkpoints: concurrent requests share decode steps and give,
// request by request, exactly what each gets alone and what the single-stream server (batching: false) gives;
// n samples and requests with one prompt share a prefill; swaps and training steps never mix weights within a
// request; maxBatch bounds the batch; a client that goes away ends its sequence; an engine without batched
// decoding (the CUDA backend refuses decodeAdd, naming its device) is served one request at a time. Requests
// pinned to different held versions decode on their own models, in separate batches.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Histogram } from 'prom-client';
import { Learner, type GenerateOptions, type GenerateResult } from '../../gpu-learner/index.ts';
import { startPolicyServer, type PolicyServer, type ServableModel } from '../../policy-server/index.ts';
import { policyBatchSize, policyPrefillSequences, policyQueuedSequences } from '../../lib/metrics.ts';
import { loadTokenizer, type Tokenizer } from '../../lib/tokenizer.ts';
import { writeModel } from '../../lib/model-init.ts';
import { FROZENLAKE_ACTION_IDS } from '../../lib/preset-tokenizers.ts';
import { sampleSeed } from '../../lib/seed.ts';

interface Choice {
  index: number;
  text?: string;
  token_ids?: number[];
  finish_reason: string;
  logprobs: { token_logprobs: number[] } | null;
  message?: { content: string | null };
}
interface Completion {
  checkpoint: number | null;
  choices: Choice[];
  usage: { prompt_tokens: number; completion_tokens: number };
}

const load = (dir: string) => Learner.load(dir, { device: 'cpu', threads: 1 });

async function post(
  server: PolicyServer,
  path: string,
  body: unknown,
  signal?: AbortSignal,
): Promise<{ status: number; body: Completion & { error?: { message: string; param: string } } }> {
  const res = await fetch(server.url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), ...(signal ? { signal } : {}) });
  return { status: res.status, body: (await res.json()) as Completion & { error?: { message: string; param: string } } };
}

/** A request's answer without what differs between two answers to it (ids, times). */
async function answer(server: PolicyServer, [path, body]: Req): Promise<unknown> {
  const r = await post(server, path, body);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return { checkpoint: r.body.checkpoint, choices: r.body.choices, usage: r.body.usage };
}

type Req = [string, Record<string, unknown>];

/** Observations of a Prometheus histogram: how many, their sum, and how many were at most `le`. */
async function histogram(h: Histogram) {
  const values = (await h.get()).values;
  const bucket = (le: number) => values.find((v) => v.metricName?.endsWith('_bucket') && v.labels.le === le)?.value ?? 0;
  return { count: values.find((v) => v.metricName?.endsWith('_count'))?.value ?? 0, sum: values.find((v) => v.metricName?.endsWith('_sum'))?.value ?? 0, bucket };
}

async function until(what: string, cond: () => boolean, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

async function fixture(t: { after(fn: () => Promise<void>): void }) {
  const root = await mkdtemp(join(tmpdir(), 'swerl-batching-'));
  const ckpt0 = await writeModel(join(root, 'ckpt-0'), 'tiny', 1);
  const ckpt1 = await writeModel(join(root, 'ckpt-1'), 'tiny', 2);
  const tokenizer: Tokenizer = await loadTokenizer(ckpt0.dir);
  const learner = await load(ckpt0.dir);
  const servers: PolicyServer[] = [];
  const serve = async (o: { batching?: boolean; maxBatch?: number; modelCache?: number; learner?: ServableModel } = {}) => {
    const s = await startPolicyServer({ learner: learner, tokenizer, modelName: 'tiny', checkpoint: 0, modelPath: ckpt0.dir, loadModel: load, ...o });
    servers.push(s);
    return s;
  };
  t.after(async () => {
    for (const s of servers) await s.close();
    learner.close();
    await rm(root, { recursive: true, force: true });
  });
  const prompt = tokenizer.encode(tokenizer.applyChatTemplate([{ role: 'user', content: 'Say something.' }], { addGenerationPrompt: true }));
  return { root, ckpt0, ckpt1, tokenizer, learner, serve, prompt };
}

test('seeded requests give the same tokens and log-probs alone, amid concurrent others and on the single-stream server, on every route and option', async (t) => {
  const { tokenizer, serve, prompt } = await fixture(t);
  const batched = await serve();
  const single = await serve({ batching: false });
  const messages = [{ role: 'user', content: 'Is the patch correct? Answer YES or NO.' }];
  const free = (await answer(batched, ['/v1/completions', { prompt: 'Hello', max_tokens: 16, seed: 9 }])) as Completion;
  const stop = free.choices[0]!.text!.slice(4, 7);
  const chatFree = (await answer(batched, ['/v1/chat/completions', { messages, max_tokens: 16, seed: 21 }])) as Completion;
  const chatStop = chatFree.choices[0]!.message!.content!.slice(3, 6);
  assert.equal(stop.length + chatStop.length, 6, JSON.stringify([free.choices[0]!.text, chatFree.choices[0]!.message!.content]));
  const seeded: Req[] = [
    ['/v1/completions', { prompt, max_tokens: 24, temperature: 1, seed: 1, logprobs: 3 }],
    ['/v1/completions', { prompt: 'Hello there', max_tokens: 16, temperature: 0.8, top_p: 0.9, seed: 2, logprobs: 1 }],
    ['/v1/completions', { prompt, max_tokens: 20, seed: 3, allowed_token_ids: Object.values(FROZENLAKE_ACTION_IDS), logprobs: 0 }],
    ['/v1/completions', { prompt, max_tokens: 30, seed: 7, stop_token_ids: [prompt[2]!, 17, 33] }],
    ['/v1/completions', { prompt: 'Hello', max_tokens: 16, seed: 9, stop }],
    ['/v1/completions', { prompt, max_tokens: 12, seed: 4, n: 3, logprobs: 2 }],
    ['/v1/completions', { prompt, max_tokens: 10, temperature: 0, logprobs: 2 }],
    ['/v1/chat/completions', { messages, max_tokens: 12, seed: 5, logprobs: true, top_logprobs: 5 }],
    ['/v1/chat/completions', { messages, max_tokens: 16, seed: 21, n: 2, stop: [chatStop], logprobs: true }],
  ];
  const alone: unknown[] = [];
  for (const r of seeded) alone.push(await answer(batched, r));
  // the same requests all at once, amid unseeded ones (some with the same prompt, joining at other steps)
  const noise: Req[] = Array.from({ length: 6 }, (_, i) => ['/v1/completions', { prompt: i % 2 ? prompt : 'Noise', max_tokens: 8 + 9 * i }]);
  const steps0 = await histogram(policyBatchSize);
  const together = await Promise.all([...seeded, ...noise].map((r) => answer(batched, r)));
  const steps = await histogram(policyBatchSize);
  assert.ok(steps.count - steps0.count - (steps.bucket(1) - steps0.bucket(1)) > 0, 'some decoding steps ran several sequences');
  assert.ok(steps.count - steps0.count < steps.sum - steps0.sum, 'fewer decoding steps than tokens decoded');
  seeded.forEach((r, i) => assert.deepEqual(together[i], alone[i], `${r[0]} ${JSON.stringify(r[1])}: amid others`));

  const policy = await histogram(policyBatchSize);
  const onSingle = await Promise.all(seeded.map((r) => answer(single, r)));
  seeded.forEach((r, i) => assert.deepEqual(onSingle[i], alone[i], `${r[0]} ${JSON.stringify(r[1])}: single-stream server`));
  assert.equal((await histogram(policyBatchSize)).count, policy.count, 'the single-stream server decodes without the batch');

  // n samples: sample 0 is the request's seed, sample i the seed lib/seed.ts's sampleSeed gives it
  const group = alone[5] as Completion;
  assert.equal(group.choices.length, 3);
  assert.deepEqual(
    group.choices.map((c) => c.index),
    [0, 1, 2],
  );
  assert.equal(
    group.usage.completion_tokens,
    group.choices.reduce((a, c) => a + c.token_ids!.length, 0),
  );
  for (let i = 0; i < 3; i++) {
    const one = (await answer(batched, ['/v1/completions', { prompt, max_tokens: 12, seed: sampleSeed(4, i), logprobs: 2 }])) as Completion;
    assert.deepEqual({ ...group.choices[i], index: 0 }, one.choices[0], `sample ${i}`);
  }
  assert.notDeepEqual(group.choices[0]!.token_ids, group.choices[1]!.token_ids);
  const chats = (alone[8] as Completion).choices;
  assert.equal(chats.length, 2);
  assert.equal(chats[0]!.message!.content, chatFree.choices[0]!.message!.content!.slice(0, chatFree.choices[0]!.message!.content!.indexOf(chatStop)));
  assert.equal(tokenizer.decode(free.choices[0]!.token_ids!).slice(4, 7), stop);
});

test('n samples share one prefill; requests with the same prompt admitted at one step share it too; a bad one fails alone', async (t) => {
  const { learner, serve, prompt } = await fixture(t);
  const server = await serve();
  const p0 = await histogram(policyPrefillSequences);
  const r = await post(server, '/v1/completions', { prompt, max_tokens: 6, seed: 1, n: 4 });
  assert.equal(r.status, 200);
  const p1 = await histogram(policyPrefillSequences);
  assert.deepEqual([p1.count - p0.count, p1.sum - p0.sum], [1, 4], 'one prefill for the 4 samples');

  // four callers with one prompt arrive while another sequence decodes: one prefill for the four
  const ids = Int32Array.from(prompt);
  const opts = (seed: number): GenerateOptions => ({ maxNewTokens: 12, temperature: 1, seed, topLogprobs: 2 });
  const alone = await Promise.all([1, 2, 3, 4].map((s) => learner.generate(ids, opts(s))));
  const long = learner.decoder.generate(Int32Array.from([1, 2, 3]), [{ maxNewTokens: 200, seed: 9 }]);
  await until('the long sequence to run', () => learner.decoder.running > 0);
  const p2 = await histogram(policyPrefillSequences);
  const bad = assert.rejects(learner.decoder.generate(ids, [{ ...opts(5), topP: 0 }]), /topP must be a finite number in \(0, 1\]/, 'the bad call fails on its own');
  const got = await Promise.all([1, 2, 3, 4].map((s) => learner.decoder.generate(ids, [opts(s)])));
  await bad;
  got.forEach((g, i) => assert.deepEqual(g[0], alone[i], `caller ${i}`));
  const p3 = await histogram(policyPrefillSequences);
  // the merged admission (5 sequences) failed, then each call was admitted alone: 4 prefills of 1, the bad one none;
  // without the bad call, one prefill of 4
  const withoutBad = learner.decoder.generate(ids, [opts(1)]);
  const rest = await Promise.all([withoutBad, ...[2, 3, 4].map((s) => learner.decoder.generate(ids, [opts(s)]))]);
  rest.forEach((g, i) => assert.deepEqual(g[0], alone[i], `caller ${i} (merged)`));
  const p4 = await histogram(policyPrefillSequences);
  assert.deepEqual([p3.count - p2.count, p3.sum - p2.sum], [4, 4], 'a failed merged admission is retried call by call');
  assert.deepEqual([p4.count - p3.count, p4.sum - p3.sum], [1, 4], 'four calls with one prompt, one prefill');
  await long;
});

test('a swap during batched decoding: requests on the old model finish on it, later ones run on the new one, none mixes the two', async (t) => {
  const { ckpt1, serve, prompt, learner, tokenizer } = await fixture(t);
  const server = await serve();
  const reqs: Req[] = [1, 2, 3, 4].map((seed) => ['/v1/completions', { prompt, max_tokens: 120 + 10 * seed, seed, logprobs: 1 }]);
  const old: unknown[] = [];
  for (const r of reqs) old.push(await answer(server, r));
  const next = await load(ckpt1.dir);
  const other = await startPolicyServer({ learner: next, tokenizer, modelName: 'tiny', checkpoint: 1 });
  const onNew: unknown[] = [];
  for (const r of reqs) onNew.push(await answer(other, r));
  await other.close();
  next.close();
  const inFlight = Promise.all(reqs.map((r) => answer(server, r)));
  await until('requests decoding on the old model', () => learner.decoder.running >= 2);
  const up = await post(server, '/update_weights_from_disk', { model_path: ckpt1.dir, checkpoint: 1 });
  assert.equal(up.status, 200);
  const after = await Promise.all(reqs.map((r) => answer(server, r)));
  const during = await inFlight;
  let onOld = 0;
  during.forEach((d, i) => {
    const c = (d as Completion).checkpoint;
    if (c === 0) onOld++;
    assert.deepEqual(d, c === 0 ? old[i] : onNew[i], `request ${i} answered by checkpoint ${c}`);
  });
  assert.ok(onOld >= 2, 'requests in flight during the swap finished on the old model');
  after.forEach((a, i) => assert.deepEqual(a, onNew[i], `request ${i} after the swap`));
  // requests pinned to the two versions at once (the server holds both, policy-server/models.ts): each runs on its
  // own model, in that model's batch; no decoding step holds sequences of both
  const ckpt0Dir = join(ckpt1.dir, '..', 'ckpt-0');
  const h0 = await histogram(policyBatchSize);
  const pinned = await Promise.all([
    ...reqs.map((r) => answer(server, [r[0], { ...r[1], model_path: ckpt0Dir }])),
    ...reqs.map((r) => answer(server, [r[0], { ...r[1], model_path: ckpt1.dir }])),
  ]);
  const h1 = await histogram(policyBatchSize);
  reqs.forEach((_, i) => {
    assert.deepEqual(pinned[i], old[i], `request ${i} pinned to checkpoint 0`);
    assert.deepEqual(pinned[reqs.length + i], onNew[i], `request ${i} pinned to checkpoint 1`);
  });
  assert.equal(h1.bucket(4) - h0.bucket(4), h1.count - h0.count, 'no step of more than the 4 requests of one version');
  assert.ok(h1.bucket(1) - h0.bucket(1) < h1.count - h0.count, 'requests of one version decoded together');
  // a server holding one model lets the old one go once the new one is served: a request pinned to it is refused
  const single = await serve({ modelCache: 1 });
  assert.equal((await post(single, '/update_weights_from_disk', { model_path: ckpt1.dir, checkpoint: 1 })).status, 200);
  const refused = await post(single, '/v1/completions', { prompt, max_tokens: 2, model_path: ckpt0Dir });
  assert.equal(refused.status, 409);
  assert.equal(refused.body.error?.param, 'model_path');
});

test('a training step on the served learner waits for the sequences decoding on it, and holds new ones until it is done', async (t) => {
  const { ckpt0, serve, prompt } = await fixture(t);
  const trained = await load(ckpt0.dir);
  t.after(() => trained.close());
  const server = await serve({ learner: trained });
  const req: Req = ['/v1/completions', { prompt, max_tokens: 150, seed: 3, logprobs: 1 }];
  const before = await answer(server, req);
  const inFlight = answer(server, req);
  await until('the request to decode', () => trained.decoder.running > 0);
  const ids = Int32Array.from([...prompt, 5, 6, 7, 8]);
  const batch = { ids, offsets: Int32Array.from([0, ids.length]), mask: Float32Array.from(ids, (_, i) => (i >= prompt.length ? 1 : 0)), advantages: Float32Array.from([1]) };
  const hp = { lr: 0.05, weightDecay: 0, beta1: 0.9, beta2: 0.999, eps: 1e-8, clipLow: 0.2, clipHigh: 0.28, maxGradNorm: 1, lMax: 8, mode: 'grpo++' as const };
  const step = trained.trainStep(batch, hp);
  assert.ok(trained.decoder.running > 0, 'the step was asked for while the request decoded');
  const queued = answer(server, req); // arrives while the step waits: runs after it, on the new weights
  await step;
  assert.deepEqual(await inFlight, before, 'the request in flight finished on the weights it started on');
  const afterStep = (await queued) as Completion;
  const direct = await trained.generate(Int32Array.from(prompt), { maxNewTokens: 150, seed: 3 });
  assert.deepEqual(afterStep.choices[0]!.logprobs!.token_logprobs, Array.from(direct.logprobs), 'a request arriving during the step ran on the new weights');
  assert.notDeepEqual(afterStep.choices[0]!.logprobs!.token_logprobs, (before as Completion).choices[0]!.logprobs!.token_logprobs);
});

test('maxBatch bounds the sequences decoding together; the others wait their turn', async (t) => {
  const { serve, prompt, learner } = await fixture(t);
  const server = await serve({ maxBatch: 2 });
  const reqs: Req[] = [1, 2, 3, 4, 5, 6].map((seed) => ['/v1/completions', { prompt, max_tokens: 20 + seed, seed, logprobs: 1 }]);
  const alone: unknown[] = [];
  for (const r of reqs) alone.push(await answer(server, r));
  const h0 = await histogram(policyBatchSize);
  let queuedMax = 0;
  const watch = setInterval(() => {
    void policyQueuedSequences.get().then((g) => (queuedMax = Math.max(queuedMax, g.values[0]?.value ?? 0)));
  }, 1);
  const together = await Promise.all(reqs.map((r) => answer(server, r)));
  clearInterval(watch);
  const h1 = await histogram(policyBatchSize);
  reqs.forEach((_, i) => assert.deepEqual(together[i], alone[i], `request ${i}`));
  assert.equal(h1.bucket(2) - h0.bucket(2), h1.count - h0.count, 'no step of more than 2 sequences');
  assert.ok(h1.bucket(1) - h0.bucket(1) < h1.count - h0.count, 'steps of 2 sequences');
  assert.ok(queuedMax > 0, 'requests waited for room');
  assert.equal((await policyQueuedSequences.get()).values[0]?.value ?? 0, 0);
  assert.equal(learner.decoder.running, 0);
  // a request with more samples than the batch holds runs when it is alone
  const wide = await post(server, '/v1/completions', { prompt, max_tokens: 5, seed: 1, n: 3 });
  assert.equal(wide.body.choices.length, 3);
});

test('a client that goes away ends its sequence', async (t) => {
  const { serve, learner } = await fixture(t);
  const server = await serve();
  const h0 = await histogram(policyBatchSize);
  const ac = new AbortController();
  const gone = post(server, '/v1/completions', { prompt: [1, 2, 3], max_tokens: 4000, seed: 1 }, ac.signal);
  await until('the request to decode', () => learner.decoder.running > 0);
  ac.abort();
  await assert.rejects(gone);
  await until('its sequence to end', () => learner.decoder.running === 0);
  const h1 = await histogram(policyBatchSize);
  assert.ok(h1.sum - h0.sum < 4000, `stopped early: ${h1.sum - h0.sum} tokens decoded of 4000`);
  const ok = await post(server, '/v1/completions', { prompt: [1, 2, 3], max_tokens: 3, seed: 1 });
  assert.equal(ok.status, 200);
});

test('an engine without batched decoding (the CUDA backend) is served one request at a time, with the same answers', async (t) => {
  const { serve, prompt, learner } = await fixture(t);
  let refused = 0;
  // the CUDA backend's Learner: generate works, batched decoding is refused naming the device (gpu-learner/src/common.cpp)
  const cudaLike: ServableModel & { decoder: unknown } = {
    config: learner.config,
    generate: (p, o) => learner.generate(p, o),
    close: () => undefined,
    decoder: {
      generate: async (): Promise<GenerateResult[]> => {
        refused++;
        throw new Error('batched decoding is implemented by the cpu backend only (device cuda); use generate');
      },
    },
  };
  const batched = await serve();
  const fallback = await serve({ learner: cudaLike });
  const reqs: Req[] = [
    ['/v1/completions', { prompt, max_tokens: 20, seed: 1, logprobs: 2 }],
    ['/v1/completions', { prompt, max_tokens: 12, seed: 2, n: 2 }],
    ['/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8, seed: 3, logprobs: true }],
  ];
  const want = await Promise.all(reqs.map((r) => answer(batched, r)));
  const got = await Promise.all(reqs.map((r) => answer(fallback, r)));
  reqs.forEach((_, i) => assert.deepEqual(got[i], want[i], `request ${i}`));
  assert.ok(refused >= 1 && refused <= reqs.length, `asked for batched decoding ${refused} times`);
  const asked = refused;
  assert.deepEqual(await answer(fallback, reqs[0]!), want[0]);
  assert.equal(refused, asked, 'not asked again once refused');
});
