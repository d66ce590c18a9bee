// The episode loop (DESIGN §3–§4), one for every environment and every way of reaching a model. It owns the
// turns, budgets and step counting (the rules are lib/episode-rules.ts's); the environment owns the world; the
// transport owns how the model is asked:
//   tokenTransport (lib/episode-tokens.ts)  token completions: one ChatML token stream with ids, mask and
//                                            log-probs, for training (and evaluation of our own policies)
//   chatTransport  (lib/episode-chat.ts)    `/v1/chat/completions`: OpenAI messages, for any served model
// Per turn: plan (end, or max_tokens) → sample → cut (a reply stopped by the budget or the context is not
// acted on) → interpret (the action, or the refusal that answers it) → step → after-step (end, or the
// observation) → the transport records the observation as the next prompt.
// Model garbage never throws out of the loop. What is not the agent's doing throws, so the episode is retried
// (DESIGN §2): a model server that fails, an environment that cannot start (reset), fails under a tool call
// (step: environments turn everything the agent causes into observations and throw only for infrastructure)
// or cannot be graded (reward).
import type { ChatMessage, EndReason, TextEnvironment } from './types.ts';
import type { TokenEpisodeRecord } from './episode-tokens.ts';
import type { ChatEpisodeRecord } from './episode-chat.ts';
import { afterStep, cutTurnEnd, planTurn, type EpisodeLimits, type EpisodeProgress, type TurnPlan } from './episode-rules.ts';

export { TOKEN_BUDGET_WARNING } from './episode-rules.ts';
export { turnSeed } from './seed.ts';
export {
  tokenTransport,
  observationText,
  toolResultFrame,
  type EpisodePolicy,
  type EpisodeTokenizer,
  type TokenEpisodeRecord,
  type TokenTransportOptions,
} from './episode-tokens.ts';
export { chatTransport, genericNoToolCallReminder, type ChatEpisodeRecord, type ChatTransportOptions } from './episode-chat.ts';

export interface EpisodeStepEvent {
  step: number;
  responseTokens: number;
  action: string;
  observation: string;
  done: boolean;
}

/** What every episode is given, whatever its transport. */
export interface EpisodeCommon extends EpisodeLimits {
  env: TextEnvironment & { actionTokens?: readonly string[] };
  /** replaces the environment's system prompt (the tool-call format's prompt) */
  systemPrompt?: string;
  sampling: { temperature: number; topP: number };
  seed: number;
  /** clock for the deadline; Date.now by default */
  now?: () => number;
  onStep?: (e: EpisodeStepEvent) => void | Promise<void>;
}

export interface RunEpisodeOptions<R> extends EpisodeCommon {
  /** how the model is asked and what the result records: tokenTransport(…) or chatTransport(…) */
  transport: EpisodeTransport<R>;
}

/** A way of reaching the model, as a strategy of the loop: started once per episode on its first messages. */
export interface EpisodeTransport<R> {
  /** `progress` is the loop's own (read-only for the transport) */
  start(o: EpisodeCommon, messages: ChatMessage[], progress: Readonly<EpisodeProgress>): TransportSession<R>;
}

/** One episode's conversation as a transport keeps it. */
export interface TransportSession<R> {
  /** the next prompt's tokens for the context rule; null: not known (not checked); 'overflow': the prompt alone exceeds the context */
  promptTokens(): Promise<number | null | 'overflow'>;
  /** the prompt counted again after the server refused a turn as too long (asked at most once a turn) */
  recount(): Promise<number | null | 'overflow'>;
  /** samples a reply of at most `maxTokens`; 'overflow': the server refused the prompt as too long for its context */
  sample(maxTokens: number): Promise<SampledReply | 'overflow'>;
  /** what the transport records of the episode */
  result(): R;
}

export interface SampledReply {
  /** tokens generated (they count against the response budget) */
  generated: number;
  finishReason: string;
  /** the reply ran into the budget or the context: the episode ends on it, unexecuted */
  cut(): void;
  interpret(): InterpretedReply;
}

/** A reply as the environment sees it. */
export interface InterpretedReply {
  /** what the environment runs */
  action: string;
  /** the observation that answers a reply the environment never sees (a malformed tool call), or null */
  refused: string | null;
  /** the action as onStep reports it */
  shown: string;
  /** room left in the context after this reply (null: not known) */
  contextLeft(): number | null;
  /** records the observation as the start of the next prompt */
  answer(observation: string): void;
}

/** What every episode ends with; the transport adds what it records (token stream, messages). */
export interface EpisodeOutcome {
  reward: number;
  end: EndReason;
  steps: number;
  /** generated tokens over the episode */
  responseTokens: number;
  info: Record<string, unknown>;
}

export async function runEpisode<R>(o: RunEpisodeOptions<R>): Promise<EpisodeOutcome & R> {
  const now = o.now ?? Date.now;
  const info: Record<string, unknown> = {};
  const progress: EpisodeProgress = { steps: 0, responseTokens: 0 };
  // infrastructure: a sandbox that cannot start is retried, never scored
  const first = (await o.env.reset()).map((m) => (m.role === 'system' && o.systemPrompt !== undefined ? { ...m, content: o.systemPrompt } : m));
  const session = o.transport.start(o, first, progress);
  let end: EndReason | undefined;
  while (end === undefined) end = await playTurn(o, session, progress, info, now);

  let reward = 0;
  if (end !== 'error') {
    // infrastructure too: a grading run that cannot happen is retried (test failures are a reward of 0, not a throw)
    const r = await o.env.reward(end);
    reward = r.reward;
    Object.assign(info, r.info ?? {});
  }
  return { ...session.result(), reward, end, steps: progress.steps, responseTokens: progress.responseTokens, info };
}

/** One turn: sampled, acted on and answered; the end reason when the episode ends in it. */
async function playTurn<R>(o: EpisodeCommon, s: TransportSession<R>, progress: EpisodeProgress, info: Record<string, unknown>, now: () => number): Promise<EndReason | undefined> {
  const sampled = await sampleTurn(o, s, progress, now);
  if ('end' in sampled) return sampled.end;
  const { reply, plan } = sampled;
  progress.responseTokens += reply.generated;
  progress.steps++;
  const cut = cutTurnEnd(plan, reply.finishReason);
  if (cut) {
    reply.cut();
    return cut;
  }

  const turn = reply.interpret();
  let step: { observation: string; done: boolean; end?: EndReason };
  if (turn.refused !== null) step = { observation: turn.refused, done: false };
  else {
    // infrastructure as well: the environment throws only when its sandbox or backend failed
    const st = await o.env.step(turn.action);
    if (st.info) Object.assign(info, st.info);
    step = st;
  }
  await o.onStep?.({ step: progress.steps, responseTokens: progress.responseTokens, action: turn.shown, observation: step.observation, done: step.done });
  const next = afterStep(o, progress, step, now(), turn.contextLeft());
  if ('end' in next) return next.end;
  turn.answer(next.observation);
  return undefined;
}

/** Plans and samples a turn; a turn the server refused as too long is planned again on its own count of the prompt, once. */
async function sampleTurn<R>(
  o: EpisodeCommon,
  s: TransportSession<R>,
  progress: EpisodeProgress,
  now: () => number,
): Promise<{ end: EndReason } | { reply: SampledReply; plan: Extract<TurnPlan, { maxTokens: number }> }> {
  const planFor = (prompt: number | null | 'overflow'): TurnPlan => (prompt === 'overflow' ? { end: 'context_exhausted' } : planTurn(o, progress, prompt, now()));
  let plan = planFor(await s.promptTokens());
  if ('end' in plan) return plan;
  let reply = await s.sample(plan.maxTokens);
  if (reply !== 'overflow') return { reply, plan };
  // the prompt's bound was not one for this server's template (or the context it reports is larger than it is)
  plan = planFor(await s.recount());
  if ('end' in plan) return plan;
  reply = await s.sample(plan.maxTokens);
  return reply === 'overflow' ? { end: 'context_exhausted' } : { reply, plan };
}

/** A token-completions episode's result (tokenTransport). */
export type TokenEpisodeResult = EpisodeOutcome & TokenEpisodeRecord;
/** A chat episode's result (chatTransport). */
export type ChatEpisodeResult = EpisodeOutcome & ChatEpisodeRecord;
