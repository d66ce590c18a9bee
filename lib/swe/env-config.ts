// The SWE environment's fields of the run config (DESIGN §3). Pure (zod only): lib/config.ts, and so
// workflow code, imports it (lib/sandbox.ts is pure too); lib/config.ts adds the `kind: 'swe'` discriminator.
import { z } from 'zod';
import { DEFAULT_LIMITS, DEFAULT_MAX_PATCH_BYTES } from '../sandbox.ts';
import { TaskFilterSchema } from './quality.ts';

/** Scratch files the agent is told to write; never part of the submitted patch. */
export const DEFAULT_SCRATCH_GLOBS = ['reproduce_issue.py', 'reproduce*.py'];

/** Edit mode's reply formats (lib/swe/edit-format.ts parses them; docs/edit-mode.md shows each). */
export const EDIT_FORMATS = ['swe-rl', 'search_replace', 'whole_function', 'numbered_lines'] as const;
export type EditFormat = (typeof EDIT_FORMATS)[number];

/** Edit mode's settings (docs/edit-mode.md): the reply format, the context budget and how replies are scored. */
export const EditConfigSchema = z
  .object({
    format: z
      .enum(EDIT_FORMATS)
      .default('swe-rl')
      .describe('"swe-rl": SWE-RL\'s exact think/solution + SEARCH/REPLACE format; or a format a small model produces more easily (docs/edit-mode.md)'),
    contextTokens: z
      .number()
      .int()
      .min(64)
      .max(1 << 20)
      .default(4096)
      .describe('tokens of the oracle-file context (cut around the touched functions to fit)'),
    rule: z
      .enum(['located', 'swe-rl'])
      .default('located')
      .describe('"located": SWE-RL\'s ratio × the share of the gold\'s changed lines the edit changes, a no-op malformed; "swe-rl": the paper\'s rule as released'),
    malformed: z
      .enum(['minus-one', 'graded'])
      .default('minus-one')
      .describe('how a malformed reply scores: "minus-one" (SWE-RL) or "graded" (−1 no block or no-op, −0.75 a block that does not apply, −0.5 a broken syntax)'),
    localizeWeight: z
      .number()
      .min(0)
      .max(0.5)
      .default(0)
      .describe(
        'rule "located": a valid edit earns this × the share of the gold\'s enclosing functions it changes a line in, and 1 − this × its located similarity (an exact fix still scores 1); 0: off',
      ),
    hybridWeight: z.number().min(0).lt(1).default(0.5).describe('"hybrid": an unresolved valid edit scores this × its similarity (a resolved one 1)'),
    lineNumbers: z
      .boolean()
      .default(true)
      .describe('number the lines of the context (the numbered_lines format needs them); a small model may copy the numbers into its search text'),
    example: z
      .enum(['worked', 'template', 'none'])
      .default('worked')
      .describe(
        'how the prompt shows the format: "worked", an example on a file of another project (a small model may copy it); "template", a block for the first file with its lines described; "none", the rules and the lines a block starts with',
      ),
  })
  .strict();
export type EditConfig = z.infer<typeof EditConfigSchema>;

/** The SWE environment's fields of the run config (lib/config.ts adds `kind: 'swe'`). */
export const SweEnvConfigSchema = z
  .object({
    tasksFile: z.string().min(1).describe('JSONL or parquet of SWE-bench-style records (lib/swe/task.ts); a relative path is made absolute by the CLI'),
    taskFilter: TaskFilterSchema.optional().describe("train only on the tasks that pass this filter: their measured quality, the factory's split (lib/swe/quality.ts)"),
    mode: z
      .enum(['agent', 'edit'])
      .default('agent')
      .describe('"agent": DeepSWE\'s multi-turn tool loop; "edit": SWE-RL\'s single turn of edits to the oracle files (docs/edit-mode.md)'),
    reward: z
      .enum(['tests', 'similarity', 'hybrid'])
      .default('tests')
      .describe(
        '"tests": 1 iff FAIL_TO_PASS and PASS_TO_PASS all pass (DeepSWE; docs/grading.md); "similarity": the SWE-RL difflib ratio, −1 when malformed; "hybrid" (edit mode): the test verdict, an unresolved edit shaped by its similarity',
      ),
    edit: EditConfigSchema.prefault({}).describe("edit mode's reply format, context budget and scoring (docs/edit-mode.md)"),
    maxSteps: z.number().int().min(1).max(10_000).default(50).describe('steps per episode in training (DeepSWE: 50)'),
    evalMaxSteps: z.number().int().min(1).max(10_000).default(100).describe("steps per episode in a run's validation (DeepSWE: 100)"),
    commandTimeoutS: z.number().int().min(1).max(3600).default(90).describe('per-command limit of execute_bash, seconds (R2E-Gym: 90)'),
    episodeTimeoutS: z
      .number()
      .int()
      .min(1)
      .max(86_400)
      .default(1200)
      .describe("the environment's own wall-clock limit from reset(), seconds; a command that would run past it ends the episode env_timeout"),
    gradeTimeoutS: z.number().int().min(1).max(7200).default(300).describe('test-run limit of grading, seconds (DeepSWE: 5 min)'),
    gradeUnsubmitted: z.boolean().default(false).describe('grade episodes that did not end with `finish` (they get 0 otherwise)'),
    grade: z
      .object({
        audit: z
          .enum(['zero', 'flag', 'off'])
          .default('zero')
          .describe(
            'the static audit of what a patch adds (lib/swe/audit.ts, docs/integrity.md): "zero" (a flag is reward 0, reason suspicious_patch), "flag" (recorded in the result and the hack-rate metrics, the reward as the tests say), "off"',
          ),
      })
      .strict()
      .prefault({})
      .describe('grading options'),
    scratchGlobs: z.array(z.string().min(1)).default(DEFAULT_SCRATCH_GLOBS).describe('files the agent is told to write for itself, never part of the patch'),
    backend: z.enum(['docker', 'kubernetes']).default('docker').describe('where sandboxes run: Docker containers or Kubernetes pods (docs/kubernetes.md)'),
    limits: z
      .object({
        cpus: z.number().gt(0).max(64).default(DEFAULT_LIMITS.cpus).describe('CPUs of one sandbox'),
        memoryBytes: z
          .number()
          .int()
          .min(8 << 20)
          .default(DEFAULT_LIMITS.memoryBytes)
          .describe('memory of one sandbox, bytes'),
        pids: z.number().int().min(16).default(DEFAULT_LIMITS.pids).describe('processes of one sandbox (Kubernetes: the kubelet’s podPidsLimit)'),
        diskMiB: z
          .number()
          .int()
          .min(0)
          .max(1 << 20)
          .default(DEFAULT_LIMITS.diskMiB)
          .describe('what the sandbox may write, MiB (a storage quota, the ephemeral-storage limit or a watchdog; docs/limits.md); 0: none'),
      })
      .strict()
      .prefault({})
      .describe('resources of each sandbox'),
    maxObservationChars: z.number().int().min(1000).max(1_000_000).default(10_000).describe('a tool observation is clipped to this many characters'),
    maxPatchBytes: z
      .number()
      .int()
      .min(1024)
      .max(64 << 20)
      .default(DEFAULT_MAX_PATCH_BYTES)
      .describe('a patch (new files or diff) larger than this ends with reward 0, reason `patch_too_large`'),
    tokenWarningAt: z.number().int().min(0).default(2048).describe('the agent is warned once when fewer response tokens than this remain'),
  })
  .strict();

/** Why a SWE environment's mode and reward do not go together (lib/config.ts and the evaluation config report it), or null. */
export function modeRewardError(c: { mode: 'agent' | 'edit'; reward: string }): string | null {
  return c.reward === 'hybrid' && c.mode !== 'edit' ? '"hybrid" needs mode "edit"' : null;
}

/** What a config's edit settings cannot combine: numbered_lines edits lines by the numbers the context shows. */
export function editSettingsError(e: EditConfig): string | null {
  return e.format === 'numbered_lines' && !e.lineNumbers ? 'the numbered_lines format edits lines by the numbers the context shows: must be true, got false' : null;
}

export type SweEnvConfig = z.infer<typeof SweEnvConfigSchema>;
export type SweEnvConfigInput = z.input<typeof SweEnvConfigSchema>;
