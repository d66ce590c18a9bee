import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { runEpisode, tokenTransport, observationText, turnSeed, TOKEN_BUDGET_WARNING, type EpisodePolicy } from '../../lib/episode.ts';
import { FrozenLakeEnv, generateMap, renderGrid } from '../../lib/envs/frozenlake.ts';
import { PolicyUnavailableError } from '../../lib/policy/http.ts';
import { createInProcessPolicyClient } from '../../lib/policy/completions.ts';
import { writeModel } from '../../lib/model-init.ts';
import { openSeed, recordingEnv, useFrozenLakeModel } from '../helpers/frozenlake-model.ts';
import { loadTokenizer } from '../../lib/tokenizer.ts';
import type { CompletionRequest, TextEnvironment } from '../../lib/types.ts';

const fl = useFrozenLakeModel('episode-test-');

/** A deterministic policy that answers the next letter of a script (and records requests). */
function scripted(letters: string, opts: { endWithImEnd?: boolean } = {}) {
  const requests: (CompletionRequest & { allowedIds?: number[] })[] = [];
  let turn = 0;
  const policy: EpisodePolicy = {
    async complete(req) {
      requests.push(req);
      const ch = letters[turn++ % letters.length];
      const ids = fl.tok.encode(ch).slice(0, req.maxTokens);
      if (opts.endWithImEnd && ids.length < req.maxTokens) ids.push(fl.tok.imEnd);
      return { ids, logprobs: ids.map((_, i) => -0.25 * (i + 1)), finishReason: ids.at(-1) === fl.tok.imEnd ? 'stop' : 'length' };
    },
  };
  return { policy, requests };
}

const base = { maxSteps: 10, responseBudget: 64, maxTokensPerTurn: 1, sampling: { temperature: 1, topP: 1 }, seed: 11 };

test('token stream is exact: prompt, sampled tokens, im_end, observation', async () => {
  const seed = openSeed();
  const env = new FrozenLakeEnv(seed);
  const { policy, requests } = scripted('RRRDDD');
  const r = await runEpisode({ ...base, env, transport: tokenTransport({ policy, tokenizer: fl.tok, allowedActionTokens: true }) });
  assert.equal(r.end, 'done');
  assert.equal(r.reward, 1);
  assert.equal(r.steps, 6);
  assert.equal(r.responseTokens, 6);

  const prompt = fl.tok.applyChatTemplate(await new FrozenLakeEnv(seed).reset(), { addGenerationPrompt: true });
  const want: number[] = fl.tok.encode(prompt);
  const wantMask: number[] = want.map(() => 0);
  assert.equal(r.promptLength, want.length);
  assert.equal(fl.tok.decode(r.ids.slice(0, r.promptLength)), prompt);
  const path: [number, number][] = [
    [0, 1],
    [0, 2],
    [0, 3],
    [1, 3],
    [2, 3],
    [3, 3],
  ];
  path.forEach((pos, k) => {
    want.push(fl.tok.tokenId('RRRDDD'[k]), fl.tok.imEnd);
    wantMask.push(1, 0);
    if (k < path.length - 1) {
      const obs = fl.tok.encode(observationText(renderGrid(generateMap(seed), pos)));
      want.push(...obs);
      wantMask.push(...obs.map(() => 0));
    }
  });
  assert.deepEqual(r.ids, want);
  assert.deepEqual(r.mask, wantMask);
  assert.deepEqual(
    r.logprobs,
    wantMask.map((m) => (m ? -0.25 : 0)),
  );
  assert.match(fl.tok.decode(r.ids), /<\|im_end\|>\n<\|im_start\|>user\nSPFF\nFFFF\nFFFF\nFFFG<\|im_end\|>\n<\|im_start\|>assistant\nR<\|im_end\|>/);
  // each request's prompt is the stream so far; per-turn seeds; allowed ids are the action letters
  requests.forEach((q, k) => assert.equal(q.seed, turnSeed(11, k)));
  assert.equal(new Set(requests.map((q) => q.seed)).size, requests.length);
  assert.deepEqual(
    requests[0].allowedIds,
    ['L', 'D', 'R', 'U'].map((c) => fl.tok.tokenId(c)),
  );
  assert.deepEqual(requests[0].stopIds, [fl.tok.imEnd]);
  assert.deepEqual(requests[1].promptIds, r.ids.slice(0, requests[1].promptIds.length));
  assert.equal(r.info.outcome, 'goal');
});

test('a turn that ends with im_end gets no extra im_end', async () => {
  const env = new FrozenLakeEnv(openSeed());
  const { policy } = scripted('U', { endWithImEnd: true });
  const r = await runEpisode({ ...base, maxSteps: 2, maxTokensPerTurn: 4, env, transport: tokenTransport({ policy, tokenizer: fl.tok }) });
  const tail = r.ids.slice(r.promptLength, r.promptLength + 3);
  assert.deepEqual(tail, [fl.tok.tokenId('U'), fl.tok.imEnd, fl.tok.encode('\n')[0]]);
  assert.deepEqual(r.mask.slice(r.promptLength, r.promptLength + 3), [1, 1, 0]);
  assert.equal(r.end, 'max_steps');
  assert.equal(r.steps, 2);
  assert.equal(r.responseTokens, 4);
});

test('max_steps, max_context, timeout', async () => {
  const { policy } = scripted('U');
  const ms = await runEpisode({ ...base, maxSteps: 3, env: new FrozenLakeEnv(openSeed()), transport: tokenTransport({ policy, tokenizer: fl.tok }) });
  assert.equal(ms.end, 'max_steps');
  assert.equal(ms.steps, 3);
  assert.equal(ms.reward, 0);

  // a 3-token budget with 2 tokens per turn: the second turn is cut by the budget and not acted on
  let calls = 0;
  const greedy: EpisodePolicy = {
    async complete(req) {
      calls++;
      const ids = Array.from({ length: req.maxTokens }, () => fl.tok.tokenId('x'));
      return { ids, logprobs: ids.map(() => -1), finishReason: 'length' };
    },
  };
  const mc = await runEpisode({
    ...base,
    responseBudget: 3,
    maxTokensPerTurn: 2,
    env: new FrozenLakeEnv(openSeed()),
    transport: tokenTransport({ policy: greedy, tokenizer: fl.tok }),
  });
  assert.equal(mc.end, 'max_context');
  assert.equal(mc.responseTokens, 3);
  assert.equal(mc.steps, 2);
  assert.equal(calls, 2);
  assert.equal(
    mc.mask.reduce((a, b) => a + b, 0),
    3,
  );
  assert.equal(mc.info.wastedSteps, 1); // 'xx' was a wasted step, the cut 'x' never reached the env

  let t = 0;
  const to = await runEpisode({ ...base, env: new FrozenLakeEnv(openSeed()), transport: tokenTransport({ policy, tokenizer: fl.tok }), deadlineMs: 2, now: () => t++ });
  assert.equal(to.end, 'timeout');
  assert.equal(to.steps, 1);
});

test('steps-remaining suffix and token-budget warning', async () => {
  const { policy } = scripted('U');
  const r = await runEpisode({
    ...base,
    maxSteps: 5,
    responseBudget: 4,
    stepsRemainingSuffix: true,
    tokenWarningAt: 2,
    env: new FrozenLakeEnv(openSeed()),
    transport: tokenTransport({ policy, tokenizer: fl.tok }),
  });
  const text = fl.tok.decode(r.ids.slice(r.promptLength));
  assert.match(text, /^U<\|im_end\|>\n<\|im_start\|>user\nPFFF\nFFFF\nFFFF\nFFFG\nSteps Remaining: 4<\|im_end\|>\n<\|im_start\|>assistant\nU/);
  assert.ok(!text.split('Steps Remaining: 3')[0].includes(TOKEN_BUDGET_WARNING));
  assert.match(text, new RegExp(`Steps Remaining: 3\\n${TOKEN_BUDGET_WARNING.replace(/\./g, '\\.')}<\\|im_end\\|>`));
  assert.equal(r.end, 'max_context');

  // an environment's own warning text, told how many response tokens are left
  const again = scripted('U');
  const r2 = await runEpisode({
    ...base,
    maxSteps: 5,
    responseBudget: 4,
    tokenWarningAt: 2,
    tokenWarning: (n) => `only ${n} left`,
    env: new FrozenLakeEnv(openSeed()),
    transport: tokenTransport({ policy: again.policy, tokenizer: fl.tok }),
  });
  const text2 = fl.tok.decode(r2.ids.slice(r2.promptLength));
  assert.match(text2, /only 2 left<\|im_end\|>/);
  assert.ok(!text2.includes(TOKEN_BUDGET_WARNING));
});

test('reset, step, reward and policy failures propagate (infrastructure); an environment may end an episode with error', async () => {
  const env: TextEnvironment = {
    reset: async () => [
      { role: 'system', content: 'x' },
      { role: 'user', content: 'y' },
    ],
    step: async () => {
      throw new Error('sandbox exploded');
    },
    reward: async () => ({ reward: 1 }),
    close: async () => {},
  };
  const { policy } = scripted('U');
  // an environment throws from step only when its sandbox failed: the rollout is retried, never scored
  await assert.rejects(runEpisode({ ...base, env, transport: tokenTransport({ policy, tokenizer: fl.tok }) }), /sandbox exploded/);
  // an episode the environment itself ends with error (the agent lost its sandbox) is a result, reward 0
  let rewarded = false;
  const lost: TextEnvironment = {
    ...env,
    step: async () => ({ observation: 'gone', done: true, end: 'error', info: { reason: 'disk_limit', error: 'evicted' } }),
    reward: async () => ((rewarded = true), { reward: 1 }),
  };
  const r = await runEpisode({ ...base, env: lost, transport: tokenTransport({ policy: scripted('U').policy, tokenizer: fl.tok }) });
  assert.equal(r.end, 'error');
  assert.deepEqual(r.info, { reason: 'disk_limit', error: 'evicted' }, 'why it ended, in the trajectory');
  assert.equal(r.reward, 0);
  assert.equal(rewarded, false);
  assert.equal(r.steps, 1);

  // reset and reward failures are infrastructure (no sandbox, no grading run): they propagate so the rollout is retried
  const noSandbox: TextEnvironment = {
    ...env,
    reset: async () => {
      throw new Error('no such image');
    },
  };
  await assert.rejects(runEpisode({ ...base, env: noSandbox, transport: tokenTransport({ policy, tokenizer: fl.tok }) }), /no such image/);
  const noGrading: TextEnvironment = {
    ...env,
    step: async () => ({ observation: 'ok', done: true, end: 'submitted' }),
    reward: async () => {
      throw new Error('grading container failed to start');
    },
  };
  await assert.rejects(runEpisode({ ...base, env: noGrading, transport: tokenTransport({ policy, tokenizer: fl.tok }) }), /grading container/);

  const down: EpisodePolicy = {
    complete: async () => {
      throw new PolicyUnavailableError('down');
    },
  };
  await assert.rejects(runEpisode({ ...base, env: new FrozenLakeEnv(1), transport: tokenTransport({ policy: down, tokenizer: fl.tok }) }), PolicyUnavailableError);
});

// --- with the real Learner -------------------------------------------------------------------

const learnerPath = new URL('../../gpu-learner/index.ts', import.meta.url);

test('real Learner: stream invariants and log-probs equal Learner.logprobs', async () => {
  const { Learner } = await import(learnerPath.href);
  const learner = await Learner.load(fl.model, { device: 'cpu', threads: 1 });
  try {
    const policy = createInProcessPolicyClient(learner);
    const ends = new Set<string>();
    for (let k = 0; k < 6; k++) {
      const env = new FrozenLakeEnv(100 + k);
      const r = await runEpisode({
        ...base,
        maxSteps: 6,
        maxTokensPerTurn: k % 2 === 0 ? 1 : 3,
        responseBudget: 12,
        env,
        transport: tokenTransport({ policy, tokenizer: fl.tok, allowedActionTokens: k % 2 === 0 }),
        seed: k,
      });
      ends.add(r.end);
      const prompt = fl.tok.applyChatTemplate(await new FrozenLakeEnv(100 + k).reset(), { addGenerationPrompt: true });
      assert.equal(fl.tok.decode(r.ids.slice(0, r.promptLength)), prompt);
      assert.ok(r.mask.slice(0, r.promptLength).every((m) => m === 0));
      assert.equal(
        r.mask.reduce((a, b) => a + b, 0),
        r.responseTokens,
      );
      assert.equal(r.ids.length, r.mask.length);
      assert.equal(r.ids.length, r.logprobs.length);
      const lp = await learner.logprobs({ ids: Int32Array.from(r.ids), offsets: Int32Array.from([0, r.ids.length]) });
      const got: ArrayLike<number> = (lp as { logprobs?: ArrayLike<number> }).logprobs ?? lp;
      r.mask.forEach((m, i) => {
        if (m) assert.ok(Math.abs(got[i] - r.logprobs[i]) < 1e-4, `token ${i}: learner ${got[i]} vs sampled ${r.logprobs[i]}`);
      });
      assert.ok(['done', 'max_steps', 'max_context'].includes(r.end));
    }
    // random weights: unconstrained turns waste the budget (max_context), action-only turns walk (max_steps / done)
    assert.ok(ends.has('max_context') && ends.size >= 2, `ends seen: ${[...ends]}`);
  } finally {
    learner.close?.();
  }
});

test('real policy server over HTTP gives the same stream as the in-process client', async () => {
  const { Learner } = await import(learnerPath.href);
  const { startPolicyServer } = await import('../../policy-server/index.ts');
  const { createPolicyClient } = await import('../../lib/policy/completions.ts');
  const learner = await Learner.load(fl.model, { device: 'cpu', threads: 1 });
  const server = await startPolicyServer({ learner, tokenizer: fl.tok, checkpoint: 0 });
  try {
    const http = createPolicyClient({ baseUrl: server.url, retries: 0 });
    assert.deepEqual(await http.servedModel(), { checkpoint: 0, path: null });
    const local = createInProcessPolicyClient(learner);
    const opts = { ...base, maxSteps: 5, maxTokensPerTurn: 2, responseBudget: 8, seed: 77 };
    const a = await runEpisode({ ...opts, env: new FrozenLakeEnv(9), transport: tokenTransport({ policy: http, tokenizer: fl.tok, allowedActionTokens: true }) });
    const b = await runEpisode({ ...opts, env: new FrozenLakeEnv(9), transport: tokenTransport({ policy: local, tokenizer: fl.tok, allowedActionTokens: true }) });
    assert.deepEqual(a.ids, b.ids);
    assert.deepEqual(a.mask, b.mask);
    a.logprobs.forEach((x, i) => assert.ok(Math.abs(x - b.logprobs[i]) < 1e-6));
    assert.equal(a.end, b.end);
    // only action letters were sampled
    const allowed = new Set(['L', 'D', 'R', 'U'].map((c) => fl.tok.tokenId(c)));
    a.ids.forEach((id, i) => a.mask[i] && assert.ok(allowed.has(id)));
  } finally {
    await server.close();
    learner.close();
  }
});

test('tools rendered by the chat template: a <tool_call> turn gets its result as the template renders a tool message', async () => {
  await writeModel(join(fl.dir, 'tiny'), 'tiny', 0);
  const tiny = await loadTokenizer(join(fl.dir, 'tiny'));
  const tools = [{ type: 'function', function: { name: 'echo', description: 'Echoes.', parameters: { type: 'object', properties: { x: { type: 'string' } } } } }];
  const replies = ['<tool_call>\n{"name": "echo", "arguments": {"x": "hi"}}\n</tool_call>', 'no call here'];
  let turn = 0;
  const policy: EpisodePolicy = {
    async complete() {
      const ids = [...tiny.encode(replies[turn++]!), tiny.imEnd];
      return { ids, logprobs: ids.map(() => -0.5), finishReason: 'stop' };
    },
  };
  const env = recordingEnv(2, { reward: 0 });
  const seen = env.seen;
  const r = await runEpisode({
    ...base,
    maxTokensPerTurn: 64,
    responseBudget: 256,
    env,
    transport: tokenTransport({ policy, tokenizer: tiny, tools }),
    systemPrompt: 'the tool prompt',
  });
  assert.deepEqual(seen, replies);
  const text = tiny.decode(r.ids);
  const prompt = tiny.applyChatTemplate(
    [
      { role: 'system', content: 'the tool prompt' },
      { role: 'user', content: 'task' },
    ],
    { addGenerationPrompt: true, tools },
  );
  assert.ok(prompt.includes('<tools>') && prompt.includes('"name": "echo"'), prompt);
  assert.ok(text.startsWith(prompt));
  // the template's tool message, byte for byte what a whole-conversation render gives
  const whole = tiny.applyChatTemplate(
    [
      { role: 'system', content: 'the tool prompt' },
      { role: 'user', content: 'task' },
      { role: 'assistant', content: replies[0]! },
      { role: 'tool', content: 'result 1', tool_call_id: 'c' },
    ],
    { addGenerationPrompt: true, tools },
  );
  assert.ok(text.startsWith(whole), `${JSON.stringify(text.slice(prompt.length))}\nvs\n${JSON.stringify(whole.slice(prompt.length))}`);
  assert.ok(whole.includes('<tool_response>\nresult 1\n</tool_response>'));
  assert.equal(r.steps, 2);
});
