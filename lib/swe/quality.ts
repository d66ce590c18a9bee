// The measured quality of a task's tests (issue 28): does the gold patch pass twice, how many wrong fixes at
// the fix's site the tests reject (strength), how many tests must flip, how long they take, and a key that
// names the change. The factory writes it into each record (`quality`); `swerl validate-tasks --quality`
// computes it for any dataset and writes it beside (`--quality-out`). Training filters on it
// (env.taskFilter) and evaluation reports pass@1 on the strong tasks beside all. Pure (zod only).
import { z } from 'zod';
import type { SweTask } from './task.ts';

export const QUALITY_VERSION = 'swerl-quality/1';
/** A task whose tests reject fewer of its wrong fixes than this is weak (flagged; evaluation's "strong" subset is the rest). */
export const DEFAULT_MIN_STRENGTH = 0.8;

export const TaskQualitySchema = z.object({
  version: z.string(),
  /** the gold patch's runs and how many passed every FAIL_TO_PASS and PASS_TO_PASS test */
  gold: z.object({ runs: z.number().int().min(0), passed: z.number().int().min(0) }),
  /** of `tried` wrong fixes at the fix's site (other mutations of the fixed lines, partial fixes), how many the tests reject */
  strength: z.object({
    tried: z.number().int().min(0),
    rejected: z.number().int().min(0),
    /** rejected / tried; null when no wrong fix could be made */
    score: z.number().min(0).max(1).nullable(),
    /** what the tests let through (descriptions) */
    accepted: z.array(z.string()).default([]),
  }),
  failToPass: z.number().int().min(0),
  passToPass: z.number().int().min(0),
  /** wall time of the full test command at the gold state, seconds */
  testSeconds: z.number().min(0),
  /** lib/factory/patch.ts dedupeKey of the gold patch */
  dedupeKey: z.string(),
});
export type TaskQuality = z.infer<typeof TaskQualitySchema>;

/** One line of a `--quality-out` file. */
export const QualityLineSchema = z.object({ instance_id: z.string(), quality: TaskQualitySchema });

/** The training run's filter over tasks (config.env.taskFilter). */
export const TaskFilterSchema = z
  .object({
    minStrength: z.number().min(0).max(1).optional().describe('keep tasks whose strength score is at least this (tasks without one are left out)'),
    maxFailToPass: z.number().int().min(1).optional().describe('keep tasks with at most this many FAIL_TO_PASS tests'),
    goldAlwaysPasses: z.boolean().optional().describe('keep tasks whose gold patch passed every run'),
    split: z.enum(['train', 'validation']).optional().describe("keep the factory's tasks of this split only (`split` of the record)"),
    qualityFile: z.string().min(1).optional().describe("a `swerl validate-tasks --quality-out` file: its quality overrides the records'"),
  })
  .strict();
export type TaskFilter = z.infer<typeof TaskFilterSchema>;

/** The quality a record carries (`quality`), if it parses. */
export function recordQuality(task: SweTask): TaskQuality | undefined {
  const r = TaskQualitySchema.safeParse((task as Record<string, unknown>).quality);
  return r.success ? r.data : undefined;
}

/** A quality sidecar (JSONL of {instance_id, quality}) as a map; a bad line is reported with its number. */
export function parseQualityLines(text: string, file: string): Map<string, TaskQuality> {
  const out = new Map<string, TaskQuality>();
  text.split('\n').forEach((l, i) => {
    if (l.trim() === '') return;
    let raw: unknown;
    try {
      raw = JSON.parse(l);
    } catch (e) {
      throw new Error(`${file} line ${i + 1}: malformed JSON: ${(e as Error).message}`);
    }
    const r = QualityLineSchema.safeParse(raw);
    if (!r.success) throw new Error(`${file} line ${i + 1}: field ${r.error.issues[0]!.path.join('.')}: ${r.error.issues[0]!.message}`);
    out.set(r.data.instance_id, r.data.quality);
  });
  return out;
}

/** Whether the task's tests are strong: a strength score of at least `minStrength`. */
export function isStrong(q: TaskQuality | undefined, minStrength = DEFAULT_MIN_STRENGTH): boolean {
  return q?.strength.score != null && q.strength.score >= minStrength;
}

/** Why `task` fails `filter` (undefined: it passes). `quality` is the sidecar's, else the record's. */
export function filterReason(task: SweTask, filter: TaskFilter, quality: TaskQuality | undefined = recordQuality(task)): string | undefined {
  if (filter.split && (task as Record<string, unknown>).split !== filter.split) return `not in split ${filter.split}`;
  const needsQuality = filter.minStrength !== undefined || filter.maxFailToPass !== undefined || filter.goldAlwaysPasses;
  if (!needsQuality) return undefined;
  if (!quality) return 'no quality metadata';
  if (filter.minStrength !== undefined && !isStrong(quality, filter.minStrength)) return `strength ${quality.strength.score ?? 'unmeasured'} below ${filter.minStrength}`;
  if (filter.maxFailToPass !== undefined && quality.failToPass > filter.maxFailToPass) return `${quality.failToPass} FAIL_TO_PASS tests, over ${filter.maxFailToPass}`;
  if (filter.goldAlwaysPasses && (quality.gold.runs === 0 || quality.gold.passed < quality.gold.runs)) return `gold passed ${quality.gold.passed} of ${quality.gold.runs} runs`;
  return undefined;
}
