// The SWE environment's fields of the run config (DESIGN §3). Pure (zod only): lib/config.ts, and so
// workflow code, imports it (lib/sandbox.ts is pure too); lib/config.ts adds the `kind: 'swe'` discriminator.
import { z } from 'zod';
import { DEFAULT_LIMITS, DEFAULT_MAX_PATCH_BYTES } from '../sandbox.ts';

/** Scratch files the agent is told to write; never part of the submitted patch. */
export const DEFAULT_SCRATCH_GLOBS = ['reproduce_issue.py', 'reproduce*.py'];

/** Edit mode's reply formats (lib/swe/edit-format.ts parses them; docs/edit-mode.md shows each). */
export const EDIT_FORMATS = ['swe-rl', 'search_replace', 'whole_function', 'numbered_lines'] as const;
export type EditFormat = (typeof EDIT_FORMATS)[number];

/** Edit mode's settings (docs/edit-mode.md): the reply format, the context budget and how replies are scored. */
export const EditConfigSchema = z
  .object({
    /** `swe-rl`: SWE-RL's exact think/solution + SEARCH/REPLACE format; or a format a small model produces more easily */
    format: z.enum(EDIT_FORMATS).default('swe-rl'),
    /** tokens of the oracle-file context (cut around the touched functions to fit) */
    contextTokens: z
      .number()
      .int()
      .min(64)
      .max(1 << 20)
      .default(4096),
    /** `located`: SWE-RL's ratio × the share of the gold's changed lines the edit changes, a no-op malformed; `swe-rl`: the paper's rule as released */
    rule: z.enum(['located', 'swe-rl']).default('located'),
    /** how `located` scores a malformed reply: `minus-one` (SWE-RL) or `graded` (−1 no block or no-op, −0.75 a block that does not apply, −0.5 a broken syntax) */
    malformed: z.enum(['minus-one', 'graded']).default('minus-one'),
    /** `hybrid`: an unresolved valid edit scores this × its similarity (a resolved one 1) */
    hybridWeight: z.number().min(0).lt(1).default(0.5),
  })
  .strict();
export type EditConfig = z.infer<typeof EditConfigSchema>;

/** The SWE environment's fields of the run config (lib/config.ts adds `kind: 'swe'`). */
export const SweEnvConfigSchema = z
  .object({
    /** JSONL or parquet of SWE-bench-style records (lib/swe/task.ts) */
    tasksFile: z.string().min(1),
    /** `agent`: DeepSWE's multi-turn tool loop; `edit`: SWE-RL's single turn of edits to the oracle files (docs/edit-mode.md) */
    mode: z.enum(['agent', 'edit']).default('agent'),
    /**
     * `tests`: 1 iff FAIL_TO_PASS and PASS_TO_PASS all pass (DeepSWE); `similarity`: SWE-RL difflib ratio, −1 when malformed;
     * `hybrid` (edit mode): the test verdict, an unresolved edit shaped by its similarity
     */
    reward: z.enum(['tests', 'similarity', 'hybrid']).default('tests'),
    edit: EditConfigSchema.prefault({}),
    /** steps per episode in training (DeepSWE 50) */
    maxSteps: z.number().int().min(1).max(10_000).default(50),
    /** steps per episode in evaluation (DeepSWE 100) */
    evalMaxSteps: z.number().int().min(1).max(10_000).default(100),
    /** per-command limit of execute_bash, seconds (R2E-Gym 90) */
    commandTimeoutS: z.number().int().min(1).max(3600).default(90),
    /** the environment's own wall-clock limit from reset(); a command that would run past it ends with env_timeout */
    episodeTimeoutS: z.number().int().min(1).max(86_400).default(1200),
    /** test-run limit of grading (DeepSWE 5 min) */
    gradeTimeoutS: z.number().int().min(1).max(7200).default(300),
    /** grade episodes that did not end with `finish` (they get 0 otherwise) */
    gradeUnsubmitted: z.boolean().default(false),
    scratchGlobs: z.array(z.string().min(1)).default(DEFAULT_SCRATCH_GLOBS),
    backend: z.enum(['docker', 'kubernetes']).default('docker'),
    limits: z
      .object({
        cpus: z.number().gt(0).max(64).default(DEFAULT_LIMITS.cpus),
        memoryBytes: z
          .number()
          .int()
          .min(8 << 20)
          .default(DEFAULT_LIMITS.memoryBytes),
        pids: z.number().int().min(16).default(DEFAULT_LIMITS.pids),
        /** what the sandbox may write, MiB (a storage quota, the ephemeral-storage limit or a watchdog; docs/limits.md); 0: none */
        diskMiB: z
          .number()
          .int()
          .min(0)
          .max(1 << 20)
          .default(DEFAULT_LIMITS.diskMiB),
      })
      .strict()
      .prefault({}),
    maxObservationChars: z.number().int().min(1000).max(1_000_000).default(10_000),
    /** a patch (new files or diff) larger than this ends with reward 0, reason `patch_too_large` */
    maxPatchBytes: z
      .number()
      .int()
      .min(1024)
      .max(64 << 20)
      .default(DEFAULT_MAX_PATCH_BYTES),
    /** warn the agent once fewer response tokens than this remain (episode loop) */
    tokenWarningAt: z.number().int().min(0).default(2048),
  })
  .strict();

/** Why a SWE environment's mode and reward do not go together (lib/config.ts and the evaluation config report it), or null. */
export function modeRewardError(c: { mode: 'agent' | 'edit'; reward: string }): string | null {
  return c.reward === 'hybrid' && c.mode !== 'edit' ? '"hybrid" needs mode "edit"' : null;
}

export type SweEnvConfig = z.infer<typeof SweEnvConfigSchema>;
export type SweEnvConfigInput = z.input<typeof SweEnvConfigSchema>;
