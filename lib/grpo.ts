// GRPO++ maths used by the rlIteration workflow (DESIGN §5), in verl core_algos style: small pure
// functions over arrays, the formula in the doc comment, selected by name from config.
// Workflow-safe: no node: imports, no I/O, no clocks, no randomness.

import { COMPACT_FILTERED, type CompactFilteredEnd, type EndReason, type Trajectory } from './types.ts';
import { countIntegrity, mergeIntegrity, type IntegrityCounts } from './swe/integrity.ts';

export type AdvantageEstimator = 'loo' | 'grpo';

/**
 * Leave-one-out advantage, no std (DeepSWE / RLOO):
 *   A_i = r_i − (Σ_{j≠i} r_j) / (G − 1);  A_i = r_i when G = 1.
 * A group whose rewards are all equal gives all zeros.
 */
export function leaveOneOutAdvantages(rewards: readonly number[]): number[] {
  const g = rewards.length;
  if (g === 0) return [];
  if (g === 1) return [rewards[0]];
  const sum = rewards.reduce((a, b) => a + b, 0);
  return rewards.map((r) => r - (sum - r) / (g - 1));
}

/**
 * GRPO advantage (DeepSeekMath): A_i = (r_i − mean(r)) / (std(r) + eps), population std.
 * All-equal groups give zeros.
 */
export function grpoAdvantages(rewards: readonly number[], eps = 1e-6): number[] {
  const g = rewards.length;
  if (g === 0) return [];
  const mean = rewards.reduce((a, b) => a + b, 0) / g;
  const variance = rewards.reduce((a, r) => a + (r - mean) * (r - mean), 0) / g;
  const std = Math.sqrt(variance);
  return rewards.map((r) => (r - mean) / (std + eps));
}

export function advantagesByName(name: AdvantageEstimator): (rewards: readonly number[]) => number[] {
  switch (name) {
    case 'loo':
      return leaveOneOutAdvantages;
    case 'grpo':
      return (r) => grpoAdvantages(r);
    default:
      throw new Error(`unknown advantage estimator ${JSON.stringify(name)}: expected 'loo' or 'grpo'`);
  }
}

/**
 * Compact filtering (DAPO/DeepSWE): an episode cut off by the harness (max_context, context_exhausted,
 * max_steps, timeout) gets loss mask 0 on every token; its reward still counts in its group's baseline.
 */
export function compactFilterMask(end: EndReason): 0 | 1 {
  return isCompactFiltered(end) ? 0 : 1;
}

export function isCompactFiltered(end: EndReason): end is CompactFilteredEnd {
  return (COMPACT_FILTERED as readonly EndReason[]).includes(end);
}

/** Compact-filtered episodes per reason, all zero. */
export function noFilteredEpisodes(): Record<CompactFilteredEnd, number> {
  return Object.fromEntries(COMPACT_FILTERED.map((k) => [k, 0])) as Record<CompactFilteredEnd, number>;
}

export interface EpisodeSummary {
  taskId: string;
  sample: number;
  reward: number;
  end: EndReason;
  /** total tokens in the stream (optional, for summaries) */
  tokens?: number;
  /** sampled assistant tokens (optional, for summaries) */
  responseTokens?: number;
  steps?: number;
  /** integrity keys of an episode graded by the tests (lib/swe/integrity.ts); absent for other episodes */
  integrity?: readonly string[];
}

/**
 * Advantages for a batch of episodes, grouped by taskId (order of the input is kept).
 * Every episode's reward counts in its group baseline, filtered or not (DESIGN §5).
 */
export function groupAdvantages(summaries: readonly Pick<EpisodeSummary, 'taskId' | 'sample' | 'reward' | 'end'>[], estimator: AdvantageEstimator): number[] {
  const fn = advantagesByName(estimator);
  const groups = new Map<string, number[]>();
  summaries.forEach((s, i) => {
    const idx = groups.get(s.taskId);
    if (idx) idx.push(i);
    else groups.set(s.taskId, [i]);
  });
  const out = new Array<number>(summaries.length).fill(0);
  for (const idx of groups.values()) {
    const adv = fn(idx.map((i) => summaries[i].reward));
    idx.forEach((i, k) => (out[i] = adv[k]));
  }
  return out;
}

export interface TrainBatchOptions {
  /** apply compact filtering (mask 0 on COMPACT_FILTERED episodes); default true */
  compactFilter?: boolean;
  /**
   * Leave out sequences that cannot contribute a gradient: zero advantage (all-equal groups) or
   * no trainable token after masking. Default false. `episodes` still reports the count before
   * dropping, so a caller that normalises by N_episodes (DESIGN §5) can keep the full-batch scale.
   */
  dropZeroAdvantage?: boolean;
  /** include the sampling log-probs as oldLogprobs (learner recomputes them when absent) */
  includeOldLogprobs?: boolean;
}

/** What one learner step reports (gpu-learner's trainStep; the workflow's learner-step result). */
export interface StepStats {
  loss: number;
  /** global gradient norm before clipping */
  gradNorm: number;
  clipFraction: number;
  meanRatio: number;
  tokens: number;
  seconds: number;
  /** no update: the gradient norm was not finite, or there was nothing to train */
  skipped: boolean;
}

/** Packed variable-length sequences as the learner takes them (gpu-learner's trainStep batch); no padding. */
export interface PackedTrainBatch {
  ids: Int32Array;
  /** n+1 entries: sequence i is ids[offsets[i], offsets[i+1]) */
  offsets: Int32Array;
  /** per token; the first token of each sequence is never trained (it has no prediction) */
  mask: Float32Array;
  /** per sequence */
  advantages: Float32Array;
  /** per token; when absent, recomputed on the current weights before the update (ρ = 1) */
  oldLogprobs?: Float32Array;
}

/** The kept sequences packed (mask: trajectory mask × compact-filter mask), with what was left out. */
export interface TrainBatch extends PackedTrainBatch {
  /** episodes in the batch before dropping (the N_episodes of the loss normalisation) */
  episodes: number;
  /** input indices of the kept sequences */
  kept: number[];
  /** tokens with mask 1 */
  trainableTokens: number;
}

/**
 * Packs trajectories into the learner's variable-length batch. Token mask = trajectory mask ×
 * compact-filter mask. With dropZeroAdvantage, sequences with A = 0 or no trainable token are
 * left out (they add 0 to Σ mask·ℓ); `episodes` keeps the original count.
 */
export function buildTrainBatch(trajs: readonly Pick<Trajectory, 'ids' | 'mask' | 'logprobs' | 'end'>[], advantages: readonly number[], opts: TrainBatchOptions = {}): TrainBatch {
  if (advantages.length !== trajs.length) {
    throw new Error(`buildTrainBatch: ${trajs.length} trajectories but ${advantages.length} advantages`);
  }
  const compact = opts.compactFilter ?? true;
  const kept: number[] = [];
  const seqMask: number[] = [];
  let total = 0;
  trajs.forEach((t, i) => {
    if (t.mask.length !== t.ids.length || t.logprobs.length !== t.ids.length) {
      throw new Error(`buildTrainBatch: trajectory ${i} has ids/mask/logprobs of different lengths`);
    }
    const m = compact ? compactFilterMask(t.end) : 1;
    if (opts.dropZeroAdvantage) {
      const trainable = m === 1 && t.mask.some((x) => x !== 0);
      if (advantages[i] === 0 || !trainable) return;
    }
    kept.push(i);
    seqMask.push(m);
    total += t.ids.length;
  });
  const ids = new Int32Array(total);
  const mask = new Float32Array(total);
  const offsets = new Int32Array(kept.length + 1);
  const adv = new Float32Array(kept.length);
  const old = opts.includeOldLogprobs ? new Float32Array(total) : undefined;
  let pos = 0;
  let trainableTokens = 0;
  kept.forEach((i, k) => {
    const t = trajs[i];
    offsets[k] = pos;
    adv[k] = advantages[i];
    for (let j = 0; j < t.ids.length; j++) {
      ids[pos + j] = t.ids[j];
      const mj = t.mask[j] * seqMask[k];
      mask[pos + j] = mj;
      if (mj !== 0) trainableTokens++;
      if (old) old[pos + j] = t.logprobs[j];
    }
    pos += t.ids.length;
  });
  offsets[kept.length] = pos;
  return { ids, offsets, mask, advantages: adv, oldLogprobs: old, episodes: trajs.length, kept, trainableTokens };
}

export interface IterationSummary {
  episodes: number;
  meanReward: number;
  /** fraction of episodes with reward ≥ 1 (the task was solved) */
  successRate: number;
  /** episodes per end reason */
  ends: Partial<Record<EndReason, number>>;
  /** compact-filtered episodes per reason */
  filtered: Record<CompactFilteredEnd, number>;
  /** groups whose rewards are all equal (zero advantage) */
  zeroAdvantageGroups: number;
  groups: number;
  tokens: number;
  responseTokens: number;
  meanSteps: number;
  /** integrity verdicts of the episodes graded by the tests (absent when none was) */
  integrity?: IntegrityCounts;
}

/** Metrics of one iteration's rollouts (what history and the metrics log carry). */
export function summariseIteration(summaries: readonly EpisodeSummary[]): IterationSummary {
  const n = summaries.length;
  const ends: Partial<Record<EndReason, number>> = {};
  const filtered = noFilteredEpisodes();
  let reward = 0;
  let success = 0;
  let tokens = 0;
  let responseTokens = 0;
  let steps = 0;
  const groups = new Map<string, number[]>();
  for (const s of summaries) {
    reward += s.reward;
    if (s.reward >= 1) success++;
    ends[s.end] = (ends[s.end] ?? 0) + 1;
    if (isCompactFiltered(s.end)) filtered[s.end]++;
    tokens += s.tokens ?? 0;
    responseTokens += s.responseTokens ?? 0;
    steps += s.steps ?? 0;
    const g = groups.get(s.taskId);
    if (g) g.push(s.reward);
    else groups.set(s.taskId, [s.reward]);
  }
  let zeroAdvantageGroups = 0;
  for (const r of groups.values()) if (r.every((x) => x === r[0])) zeroAdvantageGroups++;
  return {
    episodes: n,
    meanReward: n ? reward / n : 0,
    successRate: n ? success / n : 0,
    ends,
    filtered,
    zeroAdvantageGroups,
    groups: groups.size,
    tokens,
    responseTokens,
    meanSteps: n ? steps / n : 0,
    ...integrityOf(summaries),
  };
}

/** The integrity counts of the episodes graded by the tests, when there are any. */
function integrityOf(summaries: readonly EpisodeSummary[]): { integrity?: IntegrityCounts } {
  const graded = summaries.filter((s) => s.integrity !== undefined);
  return graded.length ? { integrity: countIntegrity(graded.map((s) => s.integrity)) } : {};
}

/** The summary of disjoint sets of whole groups (the child workflows of a fanned-out iteration). */
export function mergeIterationSummaries(parts: readonly IterationSummary[]): IterationSummary {
  const ends: Partial<Record<EndReason, number>> = {};
  const filtered = noFilteredEpisodes();
  let episodes = 0;
  let reward = 0;
  let success = 0;
  let steps = 0;
  let zeroAdvantageGroups = 0;
  let groups = 0;
  let tokens = 0;
  let responseTokens = 0;
  for (const p of parts) {
    episodes += p.episodes;
    reward += p.meanReward * p.episodes;
    success += p.successRate * p.episodes;
    steps += p.meanSteps * p.episodes;
    for (const [k, v] of Object.entries(p.ends) as [EndReason, number][]) ends[k] = (ends[k] ?? 0) + v;
    // summaries recorded before an end reason existed lack its key
    for (const k of COMPACT_FILTERED) filtered[k] += p.filtered[k] ?? 0;
    zeroAdvantageGroups += p.zeroAdvantageGroups;
    groups += p.groups;
    tokens += p.tokens;
    responseTokens += p.responseTokens;
  }
  return {
    episodes,
    meanReward: episodes ? reward / episodes : 0,
    successRate: episodes ? success / episodes : 0,
    ends,
    filtered,
    zeroAdvantageGroups,
    groups,
    tokens,
    responseTokens,
    meanSteps: episodes ? steps / episodes : 0,
    ...(parts.some((p) => p.integrity) ? { integrity: mergeIntegrity(parts.map((p) => p.integrity)) } : {}),
  };
}

// ---------------------------------------------------------------------------------------------
// Sampler–learner mismatch and its correction (DESIGN §9). The behaviour policy π_b is what sampled the
// tokens (the log-probs stored in each trajectory, from our server, vLLM or SGLang); π_old is the learner's
// recomputation on the same weights before the update. They differ when the server's numerics or weights
// differ (bf16, another kernel, a stale output head). ρ_t = π_old(y_t)/π_b(y_t) = exp(logπ_old − logπ_b).

/** What one iteration's sampled tokens say about the sampler and the learner. */
export interface MismatchStats {
  /** tokens compared (mask ≠ 0) */
  tokens: number;
  /** mean over tokens of |logπ_old − logπ_b| */
  meanAbsDelta: number;
  /** max over tokens of |logπ_old − logπ_b| */
  maxAbsDelta: number;
  /** k3 estimate of KL(π_b ‖ π_old) from the sampled tokens: mean of (ρ − 1) − log ρ (Schulman 2020; ≥ 0 per token) */
  k3: number;
  /** with a correction: the fraction of compared tokens whose weight it changed (TIS: ρ > C; MIS: ρ outside [1/C, C]) */
  corrected?: number;
  /** an asynchronous run: versions between the learner and the sampler of each compared token (DESIGN §10; max ≤ η) */
  staleness?: { max: number; mean: number };
}

/**
 * Mismatch over tokens with mask ≠ 0, all arrays packed alike:
 *   Δ_t = learner_t − behaviour_t;  meanAbsDelta = Σ|Δ|/n;  maxAbsDelta = max|Δ|;  k3 = Σ (e^Δ − 1 − Δ)/n.
 */
export function logprobMismatch(learner: ArrayLike<number>, behaviour: ArrayLike<number>, mask: ArrayLike<number>): MismatchStats {
  if (learner.length !== behaviour.length || learner.length !== mask.length) {
    throw new Error(`logprobMismatch: learner (${learner.length}), behaviour (${behaviour.length}) and mask (${mask.length}) lengths differ`);
  }
  let n = 0;
  let sumAbs = 0;
  let maxAbs = 0;
  let k3 = 0;
  for (let t = 0; t < mask.length; t++) {
    if (mask[t] === 0) continue;
    const d = learner[t] - behaviour[t];
    n++;
    sumAbs += Math.abs(d);
    maxAbs = Math.max(maxAbs, Math.abs(d));
    k3 += Math.expm1(d) - d;
  }
  return { tokens: n, meanAbsDelta: n ? sumAbs / n : 0, maxAbsDelta: maxAbs, k3: n ? k3 / n : 0 };
}

export type CorrectionKind = 'tis' | 'mis' | 'decoupled';
export interface Correction {
  kind: CorrectionKind;
  /** C ≥ 1: TIS and decoupled PPO cap ρ at C; MIS keeps tokens with 1/C ≤ ρ ≤ C */
  cap: number;
}

/** Truncated importance sampling (Yao et al. 2025, verl/SkyRL "TIS"): w_t = min(ρ_t, C). */
export function truncatedIsWeight(learnerLp: number, behaviourLp: number, cap: number): number {
  return Math.min(Math.exp(learnerLp - behaviourLp), cap);
}

/** Masked importance sampling ("MIS", token-level rejection): w_t = 1 when 1/C ≤ ρ_t ≤ C, else 0. */
export function maskedIsWeight(learnerLp: number, behaviourLp: number, cap: number): number {
  const rho = Math.exp(learnerLp - behaviourLp);
  return rho >= 1 / cap && rho <= cap ? 1 : 0;
}

/**
 * The loss mask with the correction applied per token: m'_t = m_t · w_t (a detached weight on ℓ_t: both
 * engines multiply each token's loss and gradient by its mask). GRPO++'s Σ m'·ℓ / (N·L_max) has a constant
 * divisor, so it is exactly Σ m·w·ℓ / (N·L_max); GRPO's per-sequence mean divides by Σ m' (self-normalised).
 * Returns the new mask and how many masked-in tokens got a weight other than 1 (TIS: ρ > C; MIS: dropped).
 */
export function correctedMask(mask: ArrayLike<number>, learner: ArrayLike<number>, behaviour: ArrayLike<number>, c: Correction): { mask: Float32Array; changed: number } {
  if (!(c.cap >= 1)) throw new Error(`correction.cap: must be ≥ 1, got ${c.cap}`);
  const weight = c.kind === 'tis' ? truncatedIsWeight : c.kind === 'mis' ? maskedIsWeight : c.kind === 'decoupled' ? decoupledPpoWeight : null;
  if (!weight) throw new Error(`correction.kind: must be "tis", "mis" or "decoupled", got ${JSON.stringify(c.kind)}`);
  const out = new Float32Array(mask.length);
  let changed = 0;
  for (let t = 0; t < mask.length; t++) {
    if (mask[t] === 0) continue;
    const w = weight(learner[t], behaviour[t], c.cap);
    if (c.kind === 'mis' ? w === 0 : w < Math.exp(learner[t] - behaviour[t])) changed++;
    out[t] = mask[t] * w;
  }
  return { mask: out, changed };
}

/**
 * The rows of a packed batch `all` (one sequence per trajectory) that `kept` names, as one packed array laid out
 * like the train batch of those sequences (buildTrainBatch's `kept`): per-token values computed once over every
 * trajectory (the learner's log-probs) follow the sequences into the train batch.
 */
export function keptTokens(values: ArrayLike<number>, allOffsets: ArrayLike<number>, kept: readonly number[]): Float32Array {
  let total = 0;
  for (const i of kept) total += allOffsets[i + 1] - allOffsets[i];
  const out = new Float32Array(total);
  let pos = 0;
  for (const i of kept) {
    for (let t = allOffsets[i]; t < allOffsets[i + 1]; t++) out[pos++] = values[t];
  }
  return out;
}

/** keptTokens' inverse: `values`, laid out like the train batch of the sequences `kept` names, written into `into` at their rows of `all`. */
export function scatterKeptTokens(into: Float32Array, allOffsets: ArrayLike<number>, kept: readonly number[], values: ArrayLike<number>): void {
  let total = 0;
  for (const i of kept) total += allOffsets[i + 1] - allOffsets[i];
  if (total !== values.length) throw new Error(`scatterKeptTokens: ${values.length} values for ${total} tokens of the kept sequences`);
  let pos = 0;
  for (const i of kept) {
    for (let t = allOffsets[i]; t < allOffsets[i + 1]; t++) into[t] = values[pos++];
  }
}

/** The sequences `seqs` names of a packed batch, packed alone (ids and offsets) in that order. */
export function packSequences(all: { ids: Int32Array; offsets: Int32Array }, seqs: readonly number[]): { ids: Int32Array; offsets: Int32Array } {
  const offsets = new Int32Array(seqs.length + 1);
  seqs.forEach((i, k) => (offsets[k + 1] = offsets[k] + all.offsets[i + 1] - all.offsets[i]));
  const ids = new Int32Array(offsets[seqs.length]);
  seqs.forEach((i, k) => ids.set(all.ids.subarray(all.offsets[i], all.offsets[i + 1]), offsets[k]));
  return { ids, offsets };
}

// ---------------------------------------------------------------------------------------------
// Decoupled PPO (Hilton et al. 2022, "Batch size-invariance for policy optimization"; AReaL, Fu et al. 2025) for
// asynchronous runs (DESIGN §10). Three policies: π_b the behaviour policy that sampled the token (a checkpoint
// up to η versions old, stored log-prob), π_prox the proximal policy (the learner's pre-step weights: the log-probs
// it recomputes before the update, π_old above) and π_θ the weights being optimised:
//   ℓ_t = w_t · max(−A·r_t, −A·clip(r_t, 1−ε_low, 1+ε_high)),   r_t = π_θ/π_prox,   w_t = min(π_prox/π_b, C).
// The trust region is around π_prox, not around the stale π_b (the "coupled" loss, whose ratio is π_θ/π_b,
// clips most stale tokens away and is what collapses at η = 4 in AReaL's study); w_t corrects for sampling
// from π_b. Both engines already compute the bracket with π_prox (they recompute π_old before the update),
// so w_t enters as a multiplier of the loss mask, exactly like TIS: w_t is TIS's weight with ρ = π_prox/π_b.
// What differs from "tis" is where ρ comes from and the defaults: in an async run ρ carries the staleness
// as well as the numerics, and decoupled is what an async run gets when learner.correction is absent
// (lib/config.ts effectiveCorrection); "none" there trains stale tokens as if on-policy (w_t ≡ 1).

/** Decoupled PPO's behaviour weight w_t = min(π_prox/π_b, C): TIS's weight, the proximal policy in π_old's place. */
export function decoupledPpoWeight(proxLp: number, behaviourLp: number, cap: number): number {
  return truncatedIsWeight(proxLp, behaviourLp, cap);
}

/** GRPO++'s token loss (DESIGN §5) given log π_θ and log π_old: max(−A·r, −A·clip(r, 1−ε_low, 1+ε_high)), r = π_θ/π_old. */
export function clippedTokenLoss(lpTheta: number, lpOld: number, advantage: number, clipLow: number, clipHigh: number): number {
  const r = Math.exp(lpTheta - lpOld);
  return Math.max(-advantage * r, -advantage * Math.min(Math.max(r, 1 - clipLow), 1 + clipHigh));
}

/** Decoupled PPO's token loss: w · clippedTokenLoss(θ, prox), w = decoupledPpoWeight(prox, b, C) (the reference the engines' masked loss is held to). */
export function decoupledPpoTokenLoss(lp: { theta: number; prox: number; behaviour: number }, advantage: number, clip: { low: number; high: number }, cap: number): number {
  return decoupledPpoWeight(lp.prox, lp.behaviour, cap) * clippedTokenLoss(lp.theta, lp.prox, advantage, clip.low, clip.high);
}
