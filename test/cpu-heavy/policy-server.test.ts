// Real HTTP against a real gpu-learner Learner serving tiny preset checkpoints.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startPolicyServer, type PolicyServer, type ServableModel } from '../../policy-server/index.ts';
import { loadTokenizer } from '../../lib/tokenizer.ts';
import { writeModel } from '../../lib/model-init.ts';
import { FROZENLAKE_ACTION_IDS } from '../../lib/preset-tokenizers.ts';
import { createPolicyClient } from '../../lib/policy/completions.ts';
import { servesCheckpoint } from '../../lib/policy/weight-sync.ts';
import { policyModelLoads } from '../../lib/metrics.ts';

/** models /update_weights_from_disk loaded so far (this process's server) */
const updateLoads = async () => (await policyModelLoads.get()).values.find((v) => v.labels.via === 'update_weights_from_disk')?.value ?? 0;

const repo = fileURLToPath(new URL('../..', import.meta.url));

interface Completion {
  model: string;
  checkpoint: number | null;
  choices: { text: string; finish_reason: string; token_ids: number[]; logprobs: { tokens: string[]; token_logprobs: number[] } }[];
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}
interface ErrorBody {
  error: { message: string; param: string | null; code: number };
}

test('policy server over a real Learner', async (t) => {
  const { Learner } = (await import(join(repo, 'gpu-learner', 'index.ts'))) as {
    Learner: { load(dir: string, opts?: { device?: 'cpu' | 'cuda'; threads?: number }): Promise<ServableModel> };
  };
  const root = await mkdtemp(join(tmpdir(), 'swerl-serve-'));
  const ckpt0 = await writeModel(join(root, 'ckpt-0'), 'tiny', 1);
  const ckpt1 = await writeModel(join(root, 'ckpt-1'), 'tiny', 2);
  const tokenizer = await loadTokenizer(ckpt0.dir);
  const first = await Learner.load(ckpt0.dir, { device: 'cpu', threads: 1 });
  const loadModel = (dir: string) => Learner.load(dir, { device: 'cpu', threads: 1 });
  const server: PolicyServer = await startPolicyServer({ learner: first, tokenizer, port: 0, modelName: 'tiny', checkpoint: 0, loadModel });
  t.after(async () => {
    await server.close();
    first.close();
    await rm(root, { recursive: true, force: true });
  });

  const post = async <T>(path: string, body: unknown): Promise<{ status: number; body: T }> => {
    const res = await fetch(server.url + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: typeof body === 'string' ? body : JSON.stringify(body) });
    return { status: res.status, body: (await res.json()) as T };
  };
  const complete = async (body: Record<string, unknown>): Promise<Completion> => {
    const r = await post<Completion | ErrorBody>('/v1/completions', { model: 'tiny', logprobs: 1, return_tokens_as_token_ids: true, ...body });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body as Completion;
  };
  const prompt = tokenizer.encode(tokenizer.applyChatTemplate([{ role: 'user', content: 'Say something.' }], { addGenerationPrompt: true }));

  await t.test('token-id prompt: ids and log-probs of the right lengths, OpenAI shape', async () => {
    const c = await complete({ prompt, max_tokens: 12, temperature: 1, seed: 3 });
    const ch = c.choices[0]!;
    assert.equal(c.model, 'tiny');
    assert.equal(ch.finish_reason, 'length');
    assert.equal(ch.token_ids.length, 12);
    assert.equal(ch.logprobs.token_logprobs.length, 12);
    assert.deepEqual(
      ch.logprobs.tokens,
      ch.token_ids.map((id) => `token_id:${id}`),
    );
    assert.ok(ch.token_ids.every((id) => Number.isInteger(id) && id >= 0 && id < 512));
    assert.ok(ch.logprobs.token_logprobs.every((x) => Number.isFinite(x) && x <= 0));
    assert.equal(ch.text, tokenizer.decode(ch.token_ids, { skipSpecial: true }));
    assert.deepEqual(c.usage, { prompt_tokens: prompt.length, completion_tokens: 12, total_tokens: prompt.length + 12 });
  });

  await t.test('same seed gives the same ids, also under concurrent requests', async () => {
    const body = { prompt, max_tokens: 10, temperature: 1, seed: 42 };
    const [a, b, c] = await Promise.all([complete(body), complete(body), complete({ ...body, seed: 43 })]);
    assert.deepEqual(a.choices[0]!.token_ids, b.choices[0]!.token_ids);
    assert.deepEqual(a.choices[0]!.logprobs.token_logprobs, b.choices[0]!.logprobs.token_logprobs);
    assert.notDeepEqual(a.choices[0]!.token_ids, c.choices[0]!.token_ids);
  });

  await t.test('stop_token_ids end the completion at the stop token', async () => {
    const free = (await complete({ prompt, max_tokens: 16, seed: 7 })).choices[0]!.token_ids;
    const stop = free[3]!;
    const cut = free.indexOf(stop);
    const c = (await complete({ prompt, max_tokens: 16, seed: 7, stop_token_ids: [stop] })).choices[0]!;
    assert.equal(c.finish_reason, 'stop');
    assert.deepEqual(c.token_ids, free.slice(0, cut + 1));
    assert.equal(c.logprobs.token_logprobs.length, c.token_ids.length);
  });

  await t.test('allowed_token_ids restrict sampling', async () => {
    const allowed = Object.values(FROZENLAKE_ACTION_IDS);
    const c = (await complete({ prompt, max_tokens: 24, seed: 9, allowed_token_ids: allowed })).choices[0]!;
    assert.equal(c.token_ids.length, 24);
    assert.ok(
      c.token_ids.every((id) => allowed.includes(id)),
      `${c.token_ids}`,
    );
  });

  await t.test('text prompt with the tokenizer loaded', async () => {
    const c = await complete({ prompt: 'Hello there', max_tokens: 3, seed: 1, return_tokens_as_token_ids: false });
    assert.equal(c.usage.prompt_tokens, tokenizer.encode('Hello there').length);
    assert.deepEqual(
      c.choices[0]!.logprobs.tokens,
      c.choices[0]!.token_ids.map((id) => tokenizer.decode([id])),
    );
  });

  await t.test('bad bodies get 400 naming the field', async () => {
    const cases: [unknown, string, RegExp][] = [
      [{ prompt, max_tokens: 'x' }, 'max_tokens', /max_tokens: .*"x"/],
      [{ max_tokens: 3 }, 'prompt', /prompt: /],
      [{ prompt: [1, 99999] }, 'prompt', /prompt\.1: token id 99999 is outside the vocabulary/],
      [{ prompt, temperature: -1 }, 'temperature', /temperature: .*-1/],
      [{ prompt, n: 0 }, 'n', /n: .*0/],
      [{ prompt, n: 65 }, 'n', /n: .*65/],
      [{ prompt, allowed_token_ids: [] }, 'allowed_token_ids', /allowed_token_ids/],
      [{ prompt, stop_token_ids: [5000] }, 'stop_token_ids', /stop_token_ids\.0: token id 5000/],
      [{ prompt, max_tokens: 5000 }, 'max_tokens', /exceeds the context of 4096/],
      // once accepted and ignored: now refused by name (only the neutral value is what the server does)
      [{ prompt, presence_penalty: 0.5 }, 'presence_penalty', /presence_penalty is not implemented/],
      [{ prompt, frequency_penalty: -1 }, 'frequency_penalty', /frequency_penalty is not implemented/],
      [{ prompt, logit_bias: { '7': -100 } }, 'logit_bias', /logit_bias is not implemented/],
      [{ prompt, logprobs: 21 }, 'logprobs', /logprobs: /],
      ['{not json', 'body', /body: not valid JSON/],
    ];
    for (const [body, param, message] of cases) {
      const r = await post<ErrorBody>('/v1/completions', body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.body.error.param, param);
      assert.match(r.body.error.message, message);
    }
    const wrongModel = await post<ErrorBody>('/v1/completions', { model: 'gpt-4', prompt });
    assert.equal(wrongModel.status, 404);
    assert.match(wrongModel.body.error.message, /"gpt-4" does not exist/);
  });

  await t.test('/health and /v1/models report the checkpoint', async () => {
    assert.deepEqual(await (await fetch(`${server.url}/health`)).json(), { status: 'ok', model: 'tiny', checkpoint: 0 });
    const models = (await (await fetch(`${server.url}/v1/models`)).json()) as { object: string; data: { id: string; checkpoint: number; object: string }[] };
    assert.equal(models.object, 'list');
    assert.equal(models.data[0]!.id, 'tiny');
    assert.equal(models.data[0]!.checkpoint, 0);
  });

  await t.test('update_weights_from_disk swaps checkpoints; a bad path leaves serving intact', async () => {
    const body = { prompt, max_tokens: 8, seed: 11 };
    const before = (await complete(body)).choices[0]!;
    // a request in flight during the swap finishes on the old weights
    const inFlight = complete({ ...body, max_tokens: 32 });
    const up = await post<{ success: boolean; checkpoint: number }>('/update_weights_from_disk', { model_path: ckpt1.dir, checkpoint: 1 });
    assert.equal(up.status, 200, JSON.stringify(up.body));
    assert.equal(up.body.success, true);
    const old = await inFlight;
    assert.equal(old.checkpoint, 0);
    assert.deepEqual(old.choices[0]!.token_ids.slice(0, 8), before.token_ids);

    const after = await complete(body);
    assert.equal(after.checkpoint, 1);
    assert.notDeepEqual(after.choices[0]!.logprobs.token_logprobs, before.logprobs.token_logprobs);
    assert.equal(((await (await fetch(`${server.url}/health`)).json()) as { checkpoint: number }).checkpoint, 1);

    const bad = await post<ErrorBody>('/update_weights_from_disk', { model_path: join(root, 'missing'), checkpoint: 2 });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.error.param, 'model_path');
    assert.ok(bad.body.error.message.includes(join(root, 'missing')), bad.body.error.message);
    const still = await complete(body);
    assert.equal(still.checkpoint, 1);
    assert.deepEqual(still.choices[0]!.token_ids, after.choices[0]!.token_ids);
    assert.equal(server.checkpoint, 1);

    const missing = await post<ErrorBody>('/update_weights_from_disk', { checkpoint: 3 });
    assert.equal(missing.status, 400);
    assert.equal(missing.body.error.param, 'model_path');
  });

  await t.test("two runs' checkpoint 1 are told apart by directory (get_model_info), so a rollout reloads the other run's", async () => {
    const client = createPolicyClient({ baseUrl: server.url, model: 'tiny', retries: 0 });
    const served = await client.servedModel();
    assert.deepEqual(served, { checkpoint: 1, path: ckpt1.dir });
    const info = (await (await fetch(`${server.url}/get_model_info`)).json()) as { model_path: string; is_generation: boolean };
    assert.deepEqual([info.model_path, info.is_generation], [ckpt1.dir, true]);
    const other = await writeModel(join(root, 'other-run', 'ckpt', '1'), 'tiny', 3);
    assert.equal(servesCheckpoint(served, ckpt1.dir, 1), true);
    assert.equal(servesCheckpoint(served, other.dir, 1), false, 'same index, another run: not served');
    const body = { prompt, max_tokens: 6, seed: 5 };
    const mine = (await complete(body)).choices[0]!;
    await client.loadWeights(other.dir, 1);
    assert.deepEqual(await client.servedModel(), { checkpoint: 1, path: other.dir });
    const theirs = (await complete(body)).choices[0]!;
    assert.notDeepEqual(theirs.logprobs.token_logprobs, mine.logprobs.token_logprobs);

    // pinned completions run on the model of their directory while the server holds it, whichever it serves now
    const pinned = await post<{ checkpoint: number; choices: { logprobs: { token_logprobs: number[] } }[] }>('/v1/completions', { ...body, model: 'tiny', model_path: ckpt1.dir });
    assert.equal(pinned.status, 200);
    assert.deepEqual(pinned.body.choices[0]!.logprobs.token_logprobs, mine.logprobs.token_logprobs);
    // a directory it does not hold is a 409, and a pinned client loads its own
    const third = await writeModel(join(root, 'third-run', 'ckpt', '1'), 'tiny', 4);
    const raw = await post<ErrorBody>('/v1/completions', { ...body, model: 'tiny', model_path: third.dir });
    assert.equal(raw.status, 409);
    assert.equal(raw.body.error.param, 'model_path');
    const loadsBefore = await updateLoads();
    const a = createPolicyClient({ baseUrl: server.url, model: 'tiny', retries: 0, pin: { dir: ckpt1.dir, checkpoint: 1 } });
    const b = createPolicyClient({ baseUrl: server.url, model: 'tiny', retries: 0, pin: { dir: other.dir, checkpoint: 1 } });
    const c = createPolicyClient({ baseUrl: server.url, model: 'tiny', retries: 0, pin: { dir: third.dir, checkpoint: 1 } });
    const ask = { promptIds: prompt, maxTokens: 6, temperature: 1, topP: 1, seed: 5 };
    // three users on one server at once: every answer is from its own model, and only the one not held was loaded
    let third0: number[] | null = null;
    for (let i = 0; i < 3; i++) {
      const [x, y, z] = await Promise.all([a.complete(ask), b.complete(ask), c.complete(ask)]);
      assert.deepEqual(x.logprobs, mine.logprobs.token_logprobs);
      assert.deepEqual(y.logprobs, theirs.logprobs.token_logprobs);
      third0 ??= z.logprobs;
      assert.deepEqual(z.logprobs, third0);
    }
    assert.equal((await updateLoads()) - loadsBefore, 1, 'one load: the third directory');

    // an evaluated model directory (no run's checkpoint) is index -1, also when a pinned client reloads it
    const path = createPolicyClient({ baseUrl: server.url, model: 'tiny', retries: 0, pin: { dir: ckpt0.dir, checkpoint: -1 } });
    assert.equal((await path.complete(ask)).ids.length, 6);
    assert.deepEqual(await path.servedModel(), { checkpoint: -1, path: ckpt0.dir });
    assert.equal((await post<ErrorBody>('/update_weights_from_disk', { model_path: ckpt0.dir, checkpoint: -2 })).status, 400);

    // the learner worker's setLearner names the directory too
    await server.setLearner(first, 0, ckpt0.dir);
    assert.deepEqual(await client.servedModel(), { checkpoint: 0, path: ckpt0.dir });
  });

  await t.test('setLearner swaps programmatically', async () => {
    await server.setLearner(first, 0);
    const c = await complete({ prompt, max_tokens: 4, seed: 1 });
    assert.equal(c.checkpoint, 0);
  });

  await t.test('a generation error is a 500 with the message; the server stays up', async () => {
    const broken = await Learner.load(ckpt0.dir, { device: 'cpu', threads: 1 });
    broken.close();
    await server.setLearner(broken, 5);
    const r = await post<ErrorBody>('/v1/completions', { prompt, max_tokens: 2 });
    assert.equal(r.status, 500);
    assert.match(r.body.error.message, /generation failed: Learner is closed/);
    await server.setLearner(first, 0);
    const ok = await complete({ prompt, max_tokens: 2, seed: 1 });
    assert.equal(ok.choices[0]!.token_ids.length, 2);
  });
});

test('policy server without a tokenizer takes token ids only', async (t) => {
  const { Learner } = (await import(join(repo, 'gpu-learner', 'index.ts'))) as {
    Learner: { load(dir: string, opts?: { device?: 'cpu' | 'cuda'; threads?: number }): Promise<ServableModel> };
  };
  const root = await mkdtemp(join(tmpdir(), 'swerl-serve-'));
  const m = await writeModel(join(root, 'lake'), 'frozenlake', 1);
  const learner = await Learner.load(m.dir, { device: 'cpu', threads: 1 });
  const server = await startPolicyServer({ learner, modelName: 'lake' });
  t.after(async () => {
    await server.close();
    learner.close();
    await rm(root, { recursive: true, force: true });
  });
  const res = await fetch(`${server.url}/v1/completions`, { method: 'POST', body: JSON.stringify({ prompt: 'hi' }) });
  assert.equal(res.status, 400);
  assert.match(((await res.json()) as ErrorBody).error.message, /prompt: a text prompt needs a tokenizer/);
  const ok = await fetch(`${server.url}/v1/completions`, { method: 'POST', body: JSON.stringify({ prompt: [1, 60, 2], max_tokens: 2, seed: 1 }) });
  const body = (await ok.json()) as Completion;
  assert.equal(ok.status, 200);
  assert.equal(body.checkpoint, null);
  assert.equal(body.choices[0]!.text, '');
  assert.equal(body.choices[0]!.token_ids.length, 2);
  assert.ok(body.choices[0]!.logprobs.tokens.every((tok) => /^token_id:\d+$/.test(tok)));
});

test('chat completions, top log-probs, stop strings and strict parameters, through the official openai client', async (t) => {
  const { default: OpenAI, APIError } = await import('openai');
  const { Learner } = (await import(join(repo, 'gpu-learner', 'index.ts'))) as {
    Learner: { load(dir: string, opts?: { device?: 'cpu' | 'cuda'; threads?: number }): Promise<ServableModel> };
  };
  const root = await mkdtemp(join(tmpdir(), 'swerl-chat-'));
  const m = await writeModel(join(root, 'tiny'), 'tiny', 3);
  const tokenizer = await loadTokenizer(m.dir);
  const learner = await Learner.load(m.dir, { device: 'cpu', threads: 1 });
  const server = await startPolicyServer({ learner, tokenizer, modelName: 'tiny', checkpoint: 4 });
  t.after(async () => {
    await server.close();
    learner.close();
    await rm(root, { recursive: true, force: true });
  });
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  const messages = [
    { role: 'system' as const, content: 'You are a careful judge.' },
    { role: 'user' as const, content: 'Is the patch correct? Answer YES or NO.' },
  ];

  await t.test('chat: templated prompt, content, per-token log-probs with top-k, reproducible by seed', async () => {
    const req = { model: 'tiny', messages, max_tokens: 12, seed: 5, logprobs: true, top_logprobs: 5 };
    const a = await client.chat.completions.create(req);
    const b = await client.chat.completions.create(req);
    const ch = a.choices[0]!;
    assert.equal(a.object, 'chat.completion');
    assert.equal(ch.message.role, 'assistant');
    assert.equal(typeof ch.message.content, 'string');
    assert.ok(['stop', 'length'].includes(ch.finish_reason));
    const expectedPrompt = tokenizer.encode(tokenizer.applyChatTemplate(messages, { addGenerationPrompt: true })).length;
    assert.equal(a.usage!.prompt_tokens, expectedPrompt);
    const lps = ch.logprobs!.content!;
    assert.equal(lps.length, a.usage!.completion_tokens);
    for (const p of lps) {
      assert.equal(p.top_logprobs.length, 5);
      for (let k = 1; k < 5; k++) assert.ok(p.top_logprobs[k - 1]!.logprob >= p.top_logprobs[k]!.logprob);
      assert.ok(p.logprob <= p.top_logprobs[0]!.logprob + 1e-6);
      assert.ok(p.top_logprobs.reduce((s, x) => s + Math.exp(x.logprob), 0) <= 1 + 1e-5);
    }
    assert.deepEqual(b.choices[0]!.logprobs, ch.logprobs);
    assert.equal(b.choices[0]!.message.content, ch.message.content);
  });

  await t.test('greedy: the sampled token is the top-1 and its log-prob is the same number', async () => {
    const r = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 3 });
    for (const p of r.choices[0]!.logprobs!.content!) {
      assert.equal(p.token, p.top_logprobs[0]!.token);
      assert.equal(p.logprob, p.top_logprobs[0]!.logprob);
    }
  });

  await t.test('completions: logprobs: N gives N alternatives per position, the greedy token first', async () => {
    const prompt = tokenizer.encode(tokenizer.applyChatTemplate(messages, { addGenerationPrompt: true }));
    const res = await fetch(`${server.url}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ model: 'tiny', prompt, max_tokens: 6, temperature: 0, logprobs: 4, return_tokens_as_token_ids: true }),
    });
    const body = (await res.json()) as { choices: { token_ids: number[]; logprobs: { token_logprobs: number[]; top_logprobs: Record<string, number>[] } }[] };
    const ch = body.choices[0]!;
    assert.equal(ch.logprobs.top_logprobs.length, 6);
    ch.logprobs.top_logprobs.forEach((top, i) => {
      const entries = Object.entries(top);
      assert.equal(entries.length, 4);
      assert.equal(entries[0]![0], `token_id:${ch.token_ids[i]}`);
      assert.equal(entries[0]![1], ch.logprobs.token_logprobs[i]);
    });
    // and through the openai client (text prompt)
    const c = await client.completions.create({ model: 'tiny', prompt: 'Hello', max_tokens: 3, logprobs: 2, seed: 1 });
    assert.equal(c.choices[0]!.logprobs!.top_logprobs!.length, 3);
  });

  await t.test('completions: stop strings end the text before the first occurrence', async () => {
    const free = await client.completions.create({ model: 'tiny', prompt: 'Hello', max_tokens: 16, seed: 9 });
    const text = free.choices[0]!.text;
    assert.ok(text.length >= 8, JSON.stringify(text));
    const stop = text.slice(4, 7);
    const r = await client.completions.create({ model: 'tiny', prompt: 'Hello', max_tokens: 16, seed: 9, stop });
    assert.equal(r.choices[0]!.text, text.slice(0, text.indexOf(stop)));
    assert.equal(r.choices[0]!.finish_reason, 'stop');
    assert.equal((r.choices[0] as unknown as { stop_reason: string }).stop_reason, stop);
  });

  await t.test('tools reach the template; <tool_call> blocks come back as OpenAI tool calls', async () => {
    const tools = [
      { type: 'function' as const, function: { name: 'finish', description: 'Submit.', parameters: { type: 'object', properties: { command: { type: 'string' } } } } },
    ];
    const withTools = await client.chat.completions.create({ model: 'tiny', messages, tools, max_tokens: 2, seed: 1 });
    const without = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 2, seed: 1 });
    const rendered = tokenizer.applyChatTemplate(messages, { addGenerationPrompt: true, tools });
    assert.match(rendered, /<tools>\n\{"type": "function", "function": \{"name": "finish"/);
    assert.equal(withTools.usage!.prompt_tokens, tokenizer.encode(rendered).length);
    assert.ok(withTools.usage!.prompt_tokens > without.usage!.prompt_tokens);
    // a tool call and its result in the history render too
    const follow = await client.chat.completions.create({
      model: 'tiny',
      tools,
      max_tokens: 2,
      seed: 1,
      messages: [
        ...messages,
        { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'finish', arguments: '{"command":"submit"}' } }] },
        { role: 'tool', tool_call_id: 'c1', content: 'ok' },
      ],
    });
    assert.ok(follow.usage!.prompt_tokens > withTools.usage!.prompt_tokens);
    const { extractToolCallBlocks } = await import('../../lib/toolcall.ts');
    const p = extractToolCallBlocks('Let me submit.\n<tool_call>\n{"name": "finish", "arguments": {"command": "submit"}}\n</tool_call>', () => 'id1');
    assert.deepEqual(p, { content: 'Let me submit.', toolCalls: [{ id: 'id1', type: 'function', function: { name: 'finish', arguments: '{"command":"submit"}' } }] });
    assert.deepEqual(extractToolCallBlocks('<tool_call>{not json}</tool_call>'), { content: '<tool_call>{not json}</tool_call>', toolCalls: [] });
  });

  await t.test('stop strings end the text before the first occurrence', async () => {
    const free = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 16, seed: 21, logprobs: true });
    const text = free.choices[0]!.message.content!;
    assert.ok(text.length >= 8, JSON.stringify(text));
    const stop = text.slice(4, 7);
    const cut = text.indexOf(stop);
    const r = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 16, seed: 21, stop: [stop, '\u0000never'], logprobs: true });
    const ch = r.choices[0]!;
    assert.equal(ch.message.content, text.slice(0, cut));
    assert.equal(ch.finish_reason, 'stop');
    assert.equal((ch as unknown as { stop_reason: string }).stop_reason, stop);
    // the tokens kept are the free run's, up to the one that completes the stop string
    const kept = ch.logprobs!.content!.map((x) => x.token).join('');
    assert.ok(kept.startsWith(text.slice(0, cut + stop.length)) && kept.length <= text.length, JSON.stringify({ kept, text }));
    assert.equal(r.usage!.completion_tokens, ch.logprobs!.content!.length);
  });

  await t.test('parameters we do not implement are a 400 naming them', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ frequency_penalty: 0.5 }, 'frequency_penalty'],
      [{ presence_penalty: 1 }, 'presence_penalty'],
      [{ logit_bias: { '5': 10 } }, 'logit_bias'],
      [{ response_format: { type: 'json_object' } }, 'response_format'],
      [{ tool_choice: 'required', tools: [] }, 'tool_choice'],
      [{ n: 0 }, 'n'],
      [{ top_logprobs: 3 }, 'top_logprobs'],
      [{ top_logprobs: 21, logprobs: true }, 'top_logprobs'],
      [{ made_up: true }, 'made_up'],
    ];
    for (const [extra, param] of cases) {
      await assert.rejects(
        client.chat.completions.create({ model: 'tiny', messages, max_tokens: 2, ...extra } as never),
        (e: unknown) => e instanceof APIError && e.status === 400 && (e.error as { param?: string }).param === param && e.message.includes(param),
        JSON.stringify(extra),
      );
    }
    // neutral values are what the server does, so they are accepted
    const ok = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 2, presence_penalty: 0, frequency_penalty: 0, logit_bias: {}, user: 'me' });
    assert.equal(ok.choices.length, 1);
    const res = await fetch(`${server.url}/v1/completions`, { method: 'POST', body: JSON.stringify({ prompt: [1, 2], best_of: 1, suffix: 'x' }) });
    assert.equal(res.status, 400);
    assert.equal(((await res.json()) as ErrorBody).error.param, 'suffix');
  });
});
