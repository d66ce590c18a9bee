// Contracts between the parts (DESIGN.md §1–§5). Small, serialisable shapes only: these cross
// workflow history, HTTP and the artifact store. Implementations live beside their owners.

/**
 * Why an episode ended (DESIGN §3, §9). `max_context`: the episode's budget of generated tokens is spent;
 * `context_exhausted`: the model's context window has no room left for another turn (prompt + reply).
 * The harness's cut-offs (`max_context`, `context_exhausted`, `max_steps`, `timeout`) are compact-filtered.
 */
export type EndReason = 'submitted' | 'max_steps' | 'max_context' | 'context_exhausted' | 'timeout' | 'env_timeout' | 'error' | 'done';

export const COMPACT_FILTERED = ['max_context', 'context_exhausted', 'max_steps', 'timeout'] as const satisfies readonly EndReason[];
export type CompactFilteredEnd = (typeof COMPACT_FILTERED)[number];

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

/**
 * One episode as one ChatML token stream (DESIGN §4): prompt tokens (mask 0), then per turn the
 * sampled assistant tokens (mask 1, with their sampling log-probs) and the observation (mask 0).
 * Stored in the artifact store as JSON; never re-tokenised.
 */
export interface Trajectory {
  runId: string;
  iteration: number;
  taskId: string;
  sample: number;
  /** checkpoint index the sampling policy served (a streaming episode: the one of its first turn) */
  checkpoint: number;
  /** a streaming episode (DESIGN §10): per token, the checkpoint that sampled it (mask-0 tokens: that of the turn they follow or precede) */
  versions?: number[];
  ids: number[];
  /** 1 on sampled assistant tokens, 0 elsewhere, before compact filtering */
  mask: number[];
  /** sampling log-prob per token, 0 where mask is 0 */
  logprobs: number[];
  promptLength: number;
  reward: number;
  end: EndReason;
  steps: number;
  /** environment-specific details (per-test statuses, patch, final map state, …) */
  info?: Record<string, unknown>;
  seconds: number;
}

/** What a rollout activity returns through history: the key, not the tokens. */
export interface RolloutSummary {
  key: string;
  taskId: string;
  sample: number;
  reward: number;
  end: EndReason;
  steps: number;
  tokens: number;
  responseTokens: number;
  seconds: number;
  /** an episode graded by the tests: its integrity findings as distinct `kind/rule` keys (lib/swe/integrity.ts); absent otherwise */
  integrity?: string[];
}

/** A token-id completion request as OpenAI-compatible servers (ours, vLLM, SGLang) take it. */
export interface CompletionRequest {
  promptIds: number[];
  maxTokens: number;
  temperature: number;
  topP: number;
  seed?: number;
  stopIds?: number[];
}

export interface CompletionResult {
  ids: number[];
  logprobs: number[];
  finishReason: 'stop' | 'length';
  /** the checkpoint that sampled it, when the caller switches between several (an async streaming episode) */
  version?: number;
}

/** Client side of a policy server (lib/policy/completions.ts implements it over HTTP). */
export interface PolicyClient {
  complete(req: CompletionRequest): Promise<CompletionResult>;
  /** make the server serve the weights in `dir` (lib/policy/weight-sync.ts WEIGHT_SYNC: SGLang's or vLLM's reload from disk) */
  loadWeights(dir: string, checkpoint: number): Promise<void>;
  /** what the server serves now: the checkpoint index and the directory it was loaded from, each null when unknown */
  servedModel(): Promise<ServedModel>;
}

export interface ServedModel {
  checkpoint: number | null;
  path: string | null;
}

/** Result of one environment step. */
export interface EnvStep {
  observation: string;
  done: boolean;
  /** set when the environment itself ended the episode */
  end?: EndReason;
  /** why, when it ended it (e.g. `{reason, error}`): recorded in the trajectory's info */
  info?: Record<string, unknown>;
}

/**
 * A multi-turn text environment run by the shared episode loop (FrozenLake, SWE).
 * The loop owns tokens, budgets and step counting; the environment owns the world.
 */
export interface TextEnvironment {
  /** system prompt + first user message */
  reset(): Promise<ChatMessage[]>;
  /** apply the assistant's whole turn text */
  step(assistantText: string): Promise<EnvStep>;
  /** final reward once the episode ended (SWE: grading in a fresh container) */
  reward(end: EndReason): Promise<{ reward: number; info?: Record<string, unknown> }>;
  close(): Promise<void>;
  /** files kept beside a trajectory kept whole for review (the SWE environment: the grading's whole test log) */
  reviewFiles?(): Record<string, string>;
}
