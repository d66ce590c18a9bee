// An episode's end rules and the size of each turn (DESIGN §3, §9), applied by the episode loop
// (lib/episode.ts) whatever its transport (token stream or chat), so every episode ends alike:
//   before a turn:  timeout → budget of generated tokens spent (max_context) → no room left in the
//                   model's context (context_exhausted); else the turn's max_tokens
//   a cut turn:     a reply stopped by the budget or the context is not acted on
//   after a step:   done → max steps → timeout → budget; else the observation with the steps left and
//                   the warning once few tokens are left
// Pure: the caller owns the clock (`now`) and counts the prompt.
import type { EndReason } from './types.ts';

export const TOKEN_BUDGET_WARNING = 'You are running out of tokens. Submit your answer now.';

/**
 * The least room a model's context must leave after a task's first prompt for a configuration to be run at
 * all (a `finish` call takes about 20 tokens): below it no episode could ever act, so it is a config error.
 */
export const MIN_REPLY_TOKENS = 32;

/** Why a context window can never fit an episode's first turn, or null when it can. */
export function contextFitError(contextWindow: number, firstPromptTokens: number | 'overflow', what: string): string | null {
  if (firstPromptTokens !== 'overflow' && contextWindow - firstPromptTokens >= MIN_REPLY_TOKENS) return null;
  const prompt = firstPromptTokens === 'overflow' ? 'more than the whole window (the server refused it)' : `${firstPromptTokens} tokens`;
  const left = firstPromptTokens === 'overflow' ? 'none' : String(Math.max(0, contextWindow - firstPromptTokens));
  return `the model's context window of ${contextWindow} tokens cannot hold a first turn: ${what} is ${prompt}, leaving ${left} for a reply (at least ${MIN_REPLY_TOKENS} needed); use a model or server with a longer context`;
}

export interface EpisodeLimits {
  maxSteps: number;
  /** generated tokens over the whole episode (DESIGN §3's response budget; `max_context` when spent) */
  responseBudget: number;
  maxTokensPerTurn: number;
  /** the model's context window: a turn's prompt plus its reply fit in it (`context_exhausted` when they cannot) */
  contextWindow?: number;
  /** wall-clock deadline (ms since epoch) */
  deadlineMs?: number;
  /** append `\nSteps Remaining: N` to each observation (SWE) */
  stepsRemainingSuffix?: boolean;
  /** warn in the observation once fewer than this many tokens remain (of the budget or the context) */
  tokenWarningAt?: number;
  /** the warning's text given the tokens left; TOKEN_BUDGET_WARNING by default */
  tokenWarning?: (tokensLeft: number) => string;
}

export interface EpisodeProgress {
  steps: number;
  /** generated tokens so far */
  responseTokens: number;
}

/** What limits a turn's max_tokens: the per-turn cap, the episode's budget, or the room left in the context. */
export type TurnLimit = 'turn' | 'budget' | 'context';

export type TurnPlan = { end: EndReason } | { maxTokens: number; limitedBy: TurnLimit };

/**
 * Before a turn whose prompt is `promptTokens` long (null: not known, the context is not checked):
 * the end, or max_tokens = min(maxTokensPerTurn, budget left, context − prompt) (DESIGN §9).
 */
export function planTurn(l: EpisodeLimits, p: EpisodeProgress, promptTokens: number | null, nowMs: number): TurnPlan {
  if (l.deadlineMs !== undefined && nowMs >= l.deadlineMs) return { end: 'timeout' };
  const budget = l.responseBudget - p.responseTokens;
  if (budget <= 0) return { end: 'max_context' };
  const room = l.contextWindow !== undefined && promptTokens !== null ? l.contextWindow - promptTokens : Infinity;
  if (room <= 0) return { end: 'context_exhausted' };
  if (room < Math.min(l.maxTokensPerTurn, budget)) return { maxTokens: room, limitedBy: 'context' };
  return l.maxTokensPerTurn <= budget ? { maxTokens: l.maxTokensPerTurn, limitedBy: 'turn' } : { maxTokens: budget, limitedBy: 'budget' };
}

/** A reply that ran into the episode's budget or the context is cut off mid-thought: the episode ends there, unexecuted. */
export function cutTurnEnd(plan: { limitedBy: TurnLimit }, finishReason: string): EndReason | null {
  if (finishReason !== 'length' || plan.limitedBy === 'turn') return null;
  return plan.limitedBy === 'budget' ? 'max_context' : 'context_exhausted';
}

/**
 * After the environment's step: the end, or the observation to send with its suffixes. `contextLeft`: room
 * left in the context before the observation (null when unknown); the warning counts the smaller of the two.
 */
export function afterStep(
  l: EpisodeLimits,
  p: EpisodeProgress,
  step: { observation: string; done: boolean; end?: EndReason },
  nowMs: number,
  contextLeft: number | null = null,
): { end: EndReason } | { observation: string } {
  if (step.done) return { end: step.end ?? 'done' };
  if (p.steps >= l.maxSteps) return { end: 'max_steps' };
  if (l.deadlineMs !== undefined && nowMs >= l.deadlineMs) return { end: 'timeout' };
  const budget = l.responseBudget - p.responseTokens;
  if (budget <= 0) return { end: 'max_context' };
  let obs = step.observation;
  if (l.stepsRemainingSuffix) obs += `\nSteps Remaining: ${l.maxSteps - p.steps}`;
  const left = contextLeft === null ? budget : Math.min(budget, contextLeft);
  if (l.tokenWarningAt !== undefined && left <= l.tokenWarningAt) obs += `\n${l.tokenWarning ? l.tokenWarning(Math.max(0, left)) : TOKEN_BUDGET_WARNING}`;
  return { observation: obs };
}
