// The context window as an outcome (DESIGN §9): each turn's max_tokens is clamped to the room left in the
// model's context; no room left ends the episode `context_exhausted`, in the token loop and the chat loop,
// against our real policy server serving the tiny preset (4,096-token context), whose default per-turn cap
// (8,192) alone exceeds the context. The end rules (lib/episode-rules.ts) are checked by hand too.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chatTransport, runEpisode, tokenTransport } from '../../lib/episode.ts';
import { afterStep, contextFitError, cutTurnEnd, planTurn, MIN_REPLY_TOKENS } from '../../lib/episode-rules.ts';
import { createChatClient, type ChatClient } from '../../lib/policy/chat.ts';
import { createPolicyClient } from '../../lib/policy/completions.ts';
import { effectiveContextWindow, listServerModels, preflightServer } from '../../lib/policy/preflight.ts';
import { isContextOverflow, PolicyResponseError, serverRoot } from '../../lib/policy/http.ts';
import { writeModel } from '../../lib/model-init.ts';
import { loadTokenizer, type Tokenizer } from '../../lib/tokenizer.ts';
import type { CompletionRequest, TextEnvironment } from '../../lib/types.ts';
import type { PolicyServer } from '../../policy-server/index.ts';

let dir = '';
let tok: Tokenizer;
let server: PolicyServer;
let learner: { close(): void };
const CONTEXT = 4096;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'episode-context-'));
  await writeModel(join(dir, 'tiny'), 'tiny', 5);
  tok = await loadTokenizer(join(dir, 'tiny'));
  const { Learner } = await import('../../gpu-learner/index.ts');
  const { startPolicyServer } = await import('../../policy-server/index.ts');
  learner = await Learner.load(join(dir, 'tiny'), { device: 'cpu', threads: 1 });
  server = await startPolicyServer({ learner: learner as never, tokenizer: tok, checkpoint: 0 });
});
after(async () => {
  await server?.close();
  learner?.close();
  await rm(dir, { recursive: true, force: true });
});

/** An environment whose first prompt is about `promptChars` of text and whose every step is a short observation. */
function longPromptEnv(promptChars: number): TextEnvironment & { steps: number; rewardedWith: string[] } {
  const words = 'the quick brown fox jumps over the lazy dog and then some more text follows ';
  const env = {
    steps: 0,
    rewardedWith: [] as string[],
    reset: async () => [
      { role: 'system' as const, content: 'You are a helpful agent.' },
      { role: 'user' as const, content: words.repeat(Math.ceil(promptChars / words.length)).slice(0, promptChars) },
    ],
    step: async () => {
      env.steps++;
      return { observation: 'Nothing happened. Try again with more detail.', done: false };
    },
    reward: async (end: string) => {
      env.rewardedWith.push(end);
      return { reward: 0 };
    },
    close: async () => {},
  };
  return env;
}

const limits = { maxSteps: 100, responseBudget: 65_536, maxTokensPerTurn: 8192, sampling: { temperature: 1, topP: 1 }, seed: 3 };

test('end rules by hand: timeout, budget, context; a reply cut by the budget or the context is not acted on; the warning counts the context', () => {
  const l = { maxSteps: 10, responseBudget: 100, maxTokensPerTurn: 40, contextWindow: 1000 };
  assert.deepEqual(planTurn(l, { steps: 0, responseTokens: 0 }, 500, 0), { maxTokens: 40, limitedBy: 'turn' });
  assert.deepEqual(planTurn(l, { steps: 3, responseTokens: 80 }, 500, 0), { maxTokens: 20, limitedBy: 'budget' });
  assert.deepEqual(planTurn(l, { steps: 3, responseTokens: 80 }, 990, 0), { maxTokens: 10, limitedBy: 'context' });
  assert.deepEqual(planTurn(l, { steps: 3, responseTokens: 0 }, 960, 0), { maxTokens: 40, limitedBy: 'turn' }, 'exactly the room: the cap rules');
  assert.deepEqual(planTurn(l, { steps: 3, responseTokens: 0 }, 1000, 0), { end: 'context_exhausted' });
  assert.deepEqual(planTurn(l, { steps: 3, responseTokens: 100 }, 1000, 0), { end: 'max_context' }, 'the budget is checked first');
  assert.deepEqual(planTurn({ ...l, deadlineMs: 5 }, { steps: 3, responseTokens: 100 }, 1000, 5), { end: 'timeout' }, 'the clock first of all');
  assert.deepEqual(planTurn(l, { steps: 0, responseTokens: 0 }, null, 0), { maxTokens: 40, limitedBy: 'turn' }, 'an unknown prompt is not checked');
  assert.equal(cutTurnEnd({ limitedBy: 'context' }, 'length'), 'context_exhausted');
  assert.equal(cutTurnEnd({ limitedBy: 'budget' }, 'length'), 'max_context');
  assert.equal(cutTurnEnd({ limitedBy: 'turn' }, 'length'), null);
  assert.equal(cutTurnEnd({ limitedBy: 'context' }, 'stop'), null);

  const s = { observation: 'obs', done: false };
  assert.deepEqual(afterStep(l, { steps: 1, responseTokens: 10 }, { ...s, done: true, end: 'submitted' }, 0), { end: 'submitted' });
  assert.deepEqual(afterStep(l, { steps: 10, responseTokens: 10 }, s, 0), { end: 'max_steps' });
  assert.deepEqual(afterStep({ ...l, deadlineMs: 1 }, { steps: 1, responseTokens: 10 }, s, 1), { end: 'timeout' });
  assert.deepEqual(afterStep(l, { steps: 1, responseTokens: 100 }, s, 0), { end: 'max_context' });
  const w = { ...l, stepsRemainingSuffix: true, tokenWarningAt: 50, tokenWarning: (n: number) => `${n} left` };
  assert.deepEqual(afterStep(w, { steps: 2, responseTokens: 10 }, s, 0, 900), { observation: 'obs\nSteps Remaining: 8' });
  assert.deepEqual(afterStep(w, { steps: 2, responseTokens: 10 }, s, 0, 30), { observation: 'obs\nSteps Remaining: 8\n30 left' }, 'the context nearly full');
  assert.deepEqual(afterStep(w, { steps: 2, responseTokens: 60 }, s, 0, 900), { observation: 'obs\nSteps Remaining: 8\n40 left' }, 'the budget nearly spent');

  assert.equal(contextFitError(4096, 2900, 'p'), null);
  assert.match(
    contextFitError(4096, 4096 - MIN_REPLY_TOKENS + 1, 'the first prompt')!,
    /context window of 4096 tokens cannot hold a first turn: the first prompt is 4065 tokens, leaving 31/,
  );
  assert.match(contextFitError(4096, 'overflow', 'p')!, /more than the whole window/);
  assert.equal(effectiveContextWindow(4096, undefined), 4096);
  assert.equal(effectiveContextWindow(null, 2048), 2048);
  assert.equal(effectiveContextWindow(4096, 8192), 4096, 'the server knows its limit');
  assert.equal(effectiveContextWindow(null, undefined), null);
});

test('baseUrl with or without /v1 names the same server; GET /v1/models gives the context window; the preflight names an unknown model and an unreachable server', async () => {
  assert.equal(serverRoot('http://h:1/v1'), 'http://h:1');
  assert.equal(serverRoot('http://h:1/v1/'), 'http://h:1');
  assert.equal(serverRoot('http://h:1/'), 'http://h:1');
  assert.equal(serverRoot('https://api.example/openai/v1'), 'https://api.example/openai');
  for (const baseUrl of [server.url, `${server.url}/v1`, `${server.url}/v1/`]) {
    assert.deepEqual(await listServerModels({ baseUrl, model: 'policy' }), { models: ['policy'], contextWindow: CONTEXT }, baseUrl);
    const r = await createChatClient({ baseUrl, model: 'policy' }).chat({ messages: [{ role: 'user', content: 'hi' }], maxTokens: 2, temperature: 1, topP: 1, seed: 1 });
    assert.ok(r.usageReported && r.promptTokens > 0, baseUrl);
  }
  assert.deepEqual(await preflightServer({ baseUrl: `${server.url}/v1`, model: 'policy' }, 'chat', 2000), {
    models: ['policy'],
    serverContextWindow: CONTEXT,
    contextWindow: 2000,
  });
  // our server refuses another model name: the preflight names it and the served one
  await assert.rejects(
    preflightServer({ baseUrl: server.url, model: 'qwen' }, 'chat'),
    (e: Error) => e instanceof PolicyResponseError && /does not serve model "qwen" \(GET \/v1\/models lists "policy"/.test(e.message),
  );
  // a path that is no OpenAI server
  await assert.rejects(listServerModels({ baseUrl: `${server.url}/api`, model: 'policy', retries: 0 }), /\/api\/v1\/models is not served \(404\): is baseUrl/);
  // nobody listening: unavailable after the client's retries, with the address
  const { freePort } = await import('../../services/temporal-server.ts');
  const port = await freePort();
  await assert.rejects(
    preflightServer({ baseUrl: `http://127.0.0.1:${port}/v1`, model: 'policy', retries: 1, backoffMs: 10 }, 'chat'),
    new RegExp(`127.0.0.1:${port}/v1/models unavailable after 2 attempts.*ECONNREFUSED`),
  );
  // the server's own refusal of a prompt too long for its context is recognised as such
  const tooLong = await createChatClient({ baseUrl: server.url, model: 'policy' })
    .chat({ messages: [{ role: 'user', content: 'x' }], maxTokens: 9000, temperature: 1, topP: 1 })
    .then(
      () => null,
      (e: unknown) => e,
    );
  assert.ok(isContextOverflow(tooLong), String(tooLong));
  assert.ok(!isContextOverflow(new PolicyResponseError('messages.0.role: invalid', 400)));
});

test('token loop: the default per-turn cap against a 4,096-token context ends the episode context_exhausted, every request fits', async () => {
  const http = createPolicyClient({ baseUrl: server.url, retries: 0 });
  const requests: CompletionRequest[] = [];
  const policy = { complete: (req: CompletionRequest) => (requests.push(req), http.complete(req)) };
  const env = longPromptEnv(5600);
  const r = await runEpisode({ ...limits, contextWindow: CONTEXT, env, transport: tokenTransport({ policy, tokenizer: tok }) });
  assert.equal(r.end, 'context_exhausted');
  assert.deepEqual(env.rewardedWith, ['context_exhausted'], 'graded like max_steps: the environment decides the reward');
  assert.ok(r.promptLength > 3000 && r.promptLength < CONTEXT - 300, `prompt ${r.promptLength}`);
  assert.ok(requests.length >= 1);
  for (const q of requests) assert.ok(q.promptIds.length + q.maxTokens <= CONTEXT, `${q.promptIds.length} + ${q.maxTokens}`);
  assert.equal(requests[0]!.maxTokens, CONTEXT - r.promptLength, 'the first turn may fill the context');
  assert.ok(r.ids.length <= CONTEXT + 64, 'at most one observation past the window (it is never sent)');
  // without the window the same request is the server's 400 (the failure this rule replaces)
  await assert.rejects(runEpisode({ ...limits, env: longPromptEnv(5600), transport: tokenTransport({ policy: http, tokenizer: tok }) }), /exceeds the context of 4096/);
});

test('chat loop (text and openai formats): the server counts a prompt the bound cannot place; no room ends context_exhausted, no generating request is refused', async () => {
  for (const toolFormat of ['text', 'openai'] as const) {
    const real = createChatClient({ baseUrl: `${server.url}/v1`, model: 'policy', retries: 0 });
    const calls: { maxTokens: number; ok: boolean; prompt: number }[] = [];
    const chat: ChatClient = {
      async chat(req) {
        try {
          const r = await real.chat(req);
          calls.push({ maxTokens: req.maxTokens, ok: true, prompt: r.promptTokens });
          return r;
        } catch (e) {
          calls.push({ maxTokens: req.maxTokens, ok: false, prompt: -1 });
          throw e;
        }
      },
    };
    const env = longPromptEnv(5600);
    const r = await runEpisode({ ...limits, contextWindow: CONTEXT, env, transport: chatTransport({ chat, toolFormat }) });
    assert.equal(r.end, 'context_exhausted', toolFormat);
    assert.deepEqual(env.rewardedWith, ['context_exhausted']);
    assert.ok(r.contextProbes >= 1, 'the byte bound of a 5,600-character prompt leaves no room for 8,192 tokens: the server counted it');
    // every generating request fitted; only a 1-token count may be refused, as the last request: the prompt alone overflowed
    const refused = calls.filter((c) => !c.ok);
    assert.ok(refused.length === 0 || (refused.length === 1 && calls.at(-1) === refused[0] && refused[0]!.maxTokens === 1), `${toolFormat}: ${JSON.stringify(calls)}`);
    for (const c of calls.filter((x) => x.ok)) assert.ok(c.prompt + c.maxTokens <= CONTEXT, JSON.stringify(c));
    assert.ok(r.tokens <= CONTEXT);
    if (toolFormat === 'openai' && env.steps === 0 && r.steps > 0) {
      // replies without a tool call never reached the environment: the reminder speaks of tool calls
      const reminders = r.messages.filter((m) => m.role === 'user' && /No tool call was found/.test(m.content));
      assert.ok(reminders.length >= 1 || r.steps === 1);
      assert.ok(
        r.messages.every((m) => m.role !== 'user' || !/<function=FUNCTION_NAME>/.test(m.content)),
        'no text-format reminder',
      );
    }
  }
});

test('training: a context window that cannot hold the batch first turn fails sampleBatch (InvalidConfig) before any rollout; one that can passes', async () => {
  const { sampleBatch } = await import('../../activities/dataset.ts');
  await import('../../activities/swe-env.ts'); // registers env.kind "swe" with its first prompt
  const { fileStoreUrl, keys, openStore } = await import('../../lib/store.ts');
  const { sweTasks, sweTasksFile } = await import('../helpers/swe-tasks.ts');
  const { writeFileSync } = await import('node:fs');
  const [task] = await sweTasks();
  // one task whose issue alone is longer than the tiny model's 4,096-token context
  const tasksFile = join(dir, 'long-issue.jsonl');
  writeFileSync(tasksFile, `${JSON.stringify({ ...task, instance_id: `${task!.instance_id}-long`, problem_statement: 'The parser fails on nested input. '.repeat(600) })}\n`);
  const storeUrl = fileStoreUrl(join(dir, 'store'));
  await writeModel(openStore(storeUrl).dirFor(keys.checkpoint('r-ctx', 0)), 'tiny', 1);
  const config = { store: { url: storeUrl }, batch: { tasks: 1, samples: 2 }, env: { kind: 'swe', tasksFile } };
  await assert.rejects(sampleBatch({ runId: 'r-ctx', n: 0, config } as never), (e: Error & { type?: string; nonRetryable?: boolean }) => {
    assert.equal(e.type, 'InvalidConfig');
    assert.equal(e.nonRetryable, true);
    assert.match(
      e.message,
      /config.model: the model's context window of 4096 tokens cannot hold a first turn: the first prompt of task .*-long is \d+ tokens, leaving 0 for a reply .*max_position_embeddings of checkpoint 0/,
    );
    return true;
  });
  // the repository's tasks fit
  const fits = { ...config, env: { kind: 'swe', tasksFile: await sweTasksFile() } };
  const r = await sampleBatch({ runId: 'r-ctx', n: 0, config: fits } as never);
  assert.equal(r.taskIds.length, 1);
});
