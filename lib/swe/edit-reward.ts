// Edit mode's rewards (docs/edit-mode.md), from an episode's outcome: pure, one function per rule.
//   similarity  SWE-RL: −1 malformed, else the difflib ratio of the predicted and oracle changes (lib/swe/similarity.ts).
//               rule `swe-rl`: the paper's computation as released; a reply whose edits cancel out scores 0 there.
//               rule `located` (default): the ratio × the share of the oracle's changed lines the edit also changes,
//               and a reply that changes nothing is malformed: neither a no-op nor a similar line rewritten elsewhere
//               scores above an honest miss (a valid edit that changes the wrong code scores 0). With
//               localizeWeight w > 0: (1 − w) × that + w × the share of the gold's enclosing functions the edit
//               changes a line in (an edit of the right function that misses the faulty line scores w at most).
//   tests       1 iff the patch resolves the task (graded in a sandbox with every integrity check), else 0.
//   hybrid      tests, an unresolved valid edit shaped by hybridWeight × its similarity (< 1: below any fix).
// Malformed replies score −1 (`minus-one`, SWE-RL) or by kind (`graded`), always below any valid edit.
import type { EditConfig } from './env-config.ts';
import type { MalformedReason } from './edit-format.ts';

/** `graded`: what each kind of malformed reply scores (a valid edit scores ≥ 0). */
export const GRADED_MALFORMED: Readonly<Record<MalformedReason | 'syntax_error', number>> = Object.freeze({
  no_block: -1,
  no_change: -1,
  // a file the prompt did not show: what a reply copying the worked example names (shapes/area.py), so no better
  // than no block at all
  missing_file: -1,
  // no line of the search text (or no function of the name) in the file: the example copied, or code made up
  foreign_search: -1,
  search_not_found: -0.75,
  ambiguous_search: -0.75,
  bad_range: -0.75,
  syntax_error: -0.5,
});

/** What an edit-mode episode produced, as the rewards read it. */
export interface EditOutcome {
  /** null: a valid edit (a patch was made) */
  malformed: MalformedReason | null;
  /** the valid edit breaks the syntax of a Python file that parsed before */
  syntaxError: boolean;
  /** the rule-`located` similarity of a valid edit (0 otherwise) */
  located: number;
  /** the share of the gold's enclosing functions (or classes) in which a valid edit changes a line (0 otherwise) */
  localized?: number;
  /** SWE-RL's reward as its released code computes it, whatever the config (always reported) */
  swerl: number;
  /** the tests' verdict, when the patch was graded */
  resolved?: boolean;
}

/** The score of a reply that is not a valid edit (or, `graded`, one that breaks the syntax). */
export function malformedScore(reason: MalformedReason | 'syntax_error', scheme: EditConfig['malformed']): number {
  return scheme === 'graded' ? GRADED_MALFORMED[reason] : -1;
}

/** The similarity reward of an outcome under the config's rule. */
export function similarityScore(o: EditOutcome, cfg: Pick<EditConfig, 'rule' | 'malformed'> & Partial<Pick<EditConfig, 'localizeWeight'>>): number {
  if (cfg.rule === 'swe-rl') return o.swerl;
  if (o.malformed) return malformedScore(o.malformed, cfg.malformed);
  if (o.syntaxError && cfg.malformed === 'graded') return GRADED_MALFORMED.syntax_error;
  const w = cfg.localizeWeight ?? 0;
  return (1 - w) * o.located + w * (o.localized ?? 0);
}

/** The episode's reward. `tests` and `hybrid` need `resolved` for a valid edit (a malformed reply is never graded). */
export function editReward(
  kind: 'similarity' | 'tests' | 'hybrid',
  o: EditOutcome,
  cfg: Pick<EditConfig, 'rule' | 'malformed' | 'hybridWeight'> & Partial<Pick<EditConfig, 'localizeWeight'>>,
): number {
  if (kind === 'similarity') return similarityScore(o, cfg);
  if (o.malformed) return malformedScore(o.malformed, cfg.malformed);
  if (o.resolved === undefined) throw new Error(`editReward: a ${kind} reward needs the tests' verdict of the edit`);
  if (o.resolved) return 1;
  if (o.syntaxError && cfg.malformed === 'graded') return GRADED_MALFORMED.syntax_error;
  return kind === 'tests' ? 0 : cfg.hybridWeight * Math.max(0, similarityScore(o, cfg));
}
