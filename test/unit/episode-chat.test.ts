// The episode loop with its chat transport (lib/episode-chat.ts), against a scripted chat model as
// test/unit/episode.test.ts scripts the token policy; the same episode through both transports; the chat
// transport's tool-call formats, cut replies, and the server's own count of a prompt it refused as too long.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { z } from 'zod';
import { chatTransport, runEpisode, tokenTransport, turnSeed, type EpisodePolicy, type EpisodeStepEvent } from '../../lib/episode.ts';
import { FrozenLakeEnv } from '../../lib/envs/frozenlake.ts';
import { PolicyResponseError } from '../../lib/policy/http.ts';
import type { ChatClient, ChatRequest, ChatResult, ChatToolCall } from '../../lib/policy/chat.ts';
import { openSeed, recordingEnv, useFrozenLakeModel } from '../helpers/frozenlake-model.ts';

const fl = useFrozenLakeModel('episode-chat-test-');
const base = { maxSteps: 10, responseBudget: 64, maxTokensPerTurn: 1, sampling: { temperature: 1, topP: 1 }, seed: 11 };

type Reply = Partial<ChatResult> | Error;
/** A chat model that answers from a script (one entry per request), recording the requests. */
function scriptedChat(replies: Reply[]) {
  const requests: ChatRequest[] = [];
  const chat: ChatClient = {
    async chat(req) {
      requests.push(structuredClone(req));
      const r = replies[requests.length - 1];
      if (!r) throw new Error(`no scripted reply for request ${requests.length}`);
      if (r instanceof Error) throw r;
      return { content: null, toolCalls: [], finishReason: 'stop', promptTokens: 0, completionTokens: 1, usageReported: true, logprobs: null, ...r };
    },
  };
  return { chat, requests };
}

test('one loop: the same FrozenLake episode through the token and the chat transport steps, ends and reports alike', async () => {
  const letters = 'RRRDDD';
  let turn = 0;
  const policy: EpisodePolicy = {
    async complete(req) {
      const ids = fl.tok.encode(letters[turn++]!).slice(0, req.maxTokens);
      return { ids, logprobs: ids.map(() => -0.5), finishReason: 'length' };
    },
  };
  const { chat, requests } = scriptedChat([...letters].map((c) => ({ content: c, finishReason: 'length' as const })));
  const events: EpisodeStepEvent[][] = [[], []];
  const seed = openSeed();
  const viaTokens = await runEpisode({ ...base, env: new FrozenLakeEnv(seed), transport: tokenTransport({ policy, tokenizer: fl.tok }), onStep: (e) => void events[0]!.push(e) });
  const viaChat = await runEpisode({ ...base, env: new FrozenLakeEnv(seed), transport: chatTransport({ chat, toolFormat: 'text' }), onStep: (e) => void events[1]!.push(e) });
  for (const r of [viaTokens, viaChat]) assert.deepEqual([r.end, r.reward, r.steps, r.responseTokens], ['done', 1, 6, 6]);
  assert.deepEqual(events[1], events[0]);
  // the chat transport records the conversation; each turn's seed is the token loop's
  assert.deepEqual(
    requests.map((q) => q.seed),
    [0, 1, 2, 3, 4, 5].map((k) => turnSeed(11, k)),
  );
  assert.deepEqual(requests[0]!.stop, ['</function>']);
  assert.equal(viaChat.messages.length, 2 + 6 + 5, 'system, user, six replies, five observations (the last step ended it)');
  assert.deepEqual(viaChat.messages[2], { role: 'assistant', content: 'R' });
  assert.equal(viaChat.messages[3]!.role, 'user');
  assert.equal(viaChat.contextProbes, 0);
});

test('text format: a call cut by the </function> stop string is closed again before the environment runs it', async () => {
  const env = recordingEnv(1);
  const { chat } = scriptedChat([{ content: 'I will look.\n<function=execute_bash>\n<parameter=command>ls</parameter>', finishReason: 'stop' }]);
  const r = await runEpisode({ ...base, maxTokensPerTurn: 64, env, systemPrompt: 'the text prompt', transport: chatTransport({ chat, toolFormat: 'text' }) });
  assert.equal(r.end, 'done');
  assert.deepEqual(env.seen, ['I will look.\n<function=execute_bash>\n<parameter=command>ls</parameter>\n</function>']);
  assert.deepEqual(r.messages[0], { role: 'system', content: 'the text prompt' });
  assert.deepEqual(r.info, { graded: true });
});

test('openai format: a bad call and a reply without one are answered without the environment; of two calls only the first runs', async () => {
  const env = recordingEnv(1);
  const call = (id: string, name: string, args: unknown): ChatToolCall => ({ id, type: 'function', function: { name, arguments: JSON.stringify(args) } });
  const { chat, requests } = scriptedChat([
    { content: 'thinking', toolCalls: [call('a', 'nope', {})] },
    { content: 'plain text <function=finish></function>' },
    { content: null, toolCalls: [call('b', 'finish', { result: 'ok' }), call('c', 'finish', {})] },
  ]);
  const tools = [{ type: 'function', function: { name: 'finish', parameters: { type: 'object' } } }];
  const events: EpisodeStepEvent[] = [];
  const r = await runEpisode({
    ...base,
    maxTokensPerTurn: 64,
    env,
    onStep: (e) => void events.push(e),
    transport: chatTransport({ chat, toolFormat: 'openai', tools, toolSchemas: { finish: z.object({ result: z.string().optional() }) } }),
  });
  assert.equal(r.end, 'done');
  assert.equal(r.steps, 3, 'refused replies count as steps');
  assert.deepEqual(env.seen, ['<function=finish>\n<parameter=result>ok</parameter>\n</function>']);
  assert.deepEqual(requests[0]!.tools, tools);
  assert.equal(requests[0]!.stop, undefined);
  assert.match(events[0]!.observation, /^ERROR: .*nope/s);
  assert.match(events[1]!.observation, /No tool call was found in your reply\. Your reply has a `<function=\.\.\.>` block/);
  assert.equal(events[2]!.action, '<function=finish>\n<parameter=result>ok</parameter>\n</function>');
  // the refusal of a bad call goes back as its tool message; a reply without a call gets a user message
  assert.deepEqual(r.messages[3], { role: 'tool', tool_call_id: 'a', content: events[0]!.observation });
  assert.deepEqual(r.messages[5], { role: 'user', content: events[1]!.observation });
  assert.equal(r.messages.length, 7, 'the last step ended the episode: its calls are not answered');
});

test('a reply cut by the budget ends the episode max_context unexecuted, recorded as the assistant said it', async () => {
  const env = recordingEnv(5);
  const { chat, requests } = scriptedChat([{ content: 'one' }, { content: 'half a tho', finishReason: 'length', completionTokens: 2 }]);
  const r = await runEpisode({ ...base, responseBudget: 3, maxTokensPerTurn: 8, env, transport: chatTransport({ chat, toolFormat: 'text' }) });
  assert.equal(r.end, 'max_context');
  assert.deepEqual(env.seen, ['one']);
  assert.deepEqual(
    requests.map((q) => q.maxTokens),
    [3, 2],
  );
  assert.deepEqual(r.messages.at(-1), { role: 'assistant', content: 'half a tho' });
  assert.equal(r.responseTokens, 3);
});

test('a prompt the server refuses as too long is counted by the server and the turn planned again; refused twice, the episode ends context_exhausted', async () => {
  const tooLong = () => new PolicyResponseError("This model's maximum context length is 1000 tokens", 400);
  const env = recordingEnv(1);
  // the byte bound leaves room (small messages), but the server refuses: it counts 990 tokens, 10 left
  const { chat, requests } = scriptedChat([tooLong(), { promptTokens: 990, completionTokens: 1 }, { content: 'done', promptTokens: 990, completionTokens: 10 }]);
  const r = await runEpisode({ ...base, maxTokensPerTurn: 64, contextWindow: 1000, env, transport: chatTransport({ chat, toolFormat: 'text' }) });
  assert.equal(r.end, 'done');
  assert.deepEqual(
    requests.map((q) => q.maxTokens),
    [64, 1, 10],
  );
  assert.equal(r.contextProbes, 1);
  assert.equal(r.tokens, 1000);

  const again = scriptedChat([tooLong(), { promptTokens: 900, completionTokens: 1 }, tooLong()]);
  const r2 = await runEpisode({ ...base, maxTokensPerTurn: 64, contextWindow: 1000, env: recordingEnv(1), transport: chatTransport({ chat: again.chat, toolFormat: 'text' }) });
  assert.equal(r2.end, 'context_exhausted');
  assert.equal(r2.steps, 0);
  // without a context window the server's refusal is not an outcome: it propagates
  const plain = scriptedChat([tooLong()]);
  await assert.rejects(runEpisode({ ...base, env: recordingEnv(1), transport: chatTransport({ chat: plain.chat, toolFormat: 'text' }) }), /maximum context length/);
});
