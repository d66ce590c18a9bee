// The SWE environment's fields of the run config (DESIGN §3). Pure (zod only): lib/config.ts, and so
// workflow code, imports it (lib/sandbox.ts is pure too); lib/config.ts adds the `kind: 'swe'` discriminator.
import { z } from 'zod';
import { DEFAULT_LIMITS, DEFAULT_MAX_PATCH_BYTES } from '../sandbox.ts';

/** Scratch files the agent is told to write; never part of the submitted patch. */
export const DEFAULT_SCRATCH_GLOBS = ['reproduce_issue.py', 'reproduce*.py'];

/** The SWE environment's fields of the run config (lib/config.ts adds `kind: 'swe'`). */
export const SweEnvConfigSchema = z
  .object({
    /** JSONL or parquet of SWE-bench-style records (lib/swe/task.ts) */
    tasksFile: z.string().min(1),
    /** `tests`: 1 iff FAIL_TO_PASS and PASS_TO_PASS all pass (DeepSWE); `similarity`: SWE-RL difflib ratio, −1 when malformed */
    reward: z.enum(['tests', 'similarity']).default('tests'),
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
    grade: z
      .object({
        /**
         * the static audit of what a patch adds (lib/swe/audit.ts, docs/integrity.md): `zero` (a flag is reward 0,
         * reason suspicious_patch), `flag` (recorded in the result and the hack-rate metrics, the reward as the tests say), `off`
         */
        audit: z.enum(['zero', 'flag', 'off']).default('zero'),
      })
      .strict()
      .prefault({}),
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

export type SweEnvConfig = z.infer<typeof SweEnvConfigSchema>;
export type SweEnvConfigInput = z.input<typeof SweEnvConfigSchema>;
