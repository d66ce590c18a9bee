// The task factory's input (`swerl tasks synth`, the synthesizeTasks workflow), validated with zod: a bad
// field is named with its value (lib/config.ts formatIssues). Pure: the workflow imports it.
import { z } from 'zod';
import { formatIssues } from '../config.ts';
import { STRATEGIES } from './shapes.ts';

/** Where a repository comes from: a directory, a tarball, or a PyPI source distribution (which must ship its tests). */
export type RepoSource = { kind: 'dir'; path: string } | { kind: 'tarball'; path: string } | { kind: 'pypi'; name: string; version: string };

const PYPI = /^pypi:([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9._+!-]*)$/;

/** Parses `DIR`, `FILE.tar.gz|.tgz|.tar` or `pypi:NAME==VERSION`; a bad spec throws naming it. */
export function parseRepoSource(spec: string): RepoSource {
  if (spec.startsWith('pypi:')) {
    const m = PYPI.exec(spec);
    if (!m) throw new Error(`repo source ${JSON.stringify(spec)}: a PyPI source is pypi:NAME==VERSION (an exact version)`);
    return { kind: 'pypi', name: m[1]!, version: m[2]! };
  }
  if (!spec.startsWith('/')) throw new Error(`repo source ${JSON.stringify(spec)}: must be an absolute path or pypi:NAME==VERSION`);
  return /\.(tar\.gz|tgz|tar)$/.test(spec) ? { kind: 'tarball', path: spec } : { kind: 'dir', path: spec };
}

const relDir = z
  .string()
  .min(1)
  .refine((d) => !d.startsWith('/') && !d.split('/').includes('..'), 'must be a path inside the repository');

export const SynthRepoSchema = z
  .object({
    /** an absolute directory or tarball, or pypi:NAME==VERSION */
    source: z.string().superRefine((s, ctx) => {
      try {
        parseRepoSource(s);
      } catch (e) {
        ctx.addIssue({ code: 'custom', message: (e as Error).message });
      }
    }),
    /** run from the repository root; must run pytest (the factory reads pytest's results) */
    testCmd: z.string().min(1),
    /** owner/name (default: from the source) */
    name: z
      .string()
      .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*(\/[A-Za-z0-9][A-Za-z0-9._-]*)?$/, 'must be NAME or OWNER/NAME')
      .optional(),
    /** the source's git commit when known (a tarball of `git archive`): in the provenance and the instance ids */
    commit: z
      .string()
      .regex(/^[0-9a-f]{7,40}$/, 'must be a hex commit id')
      .optional(),
    /** where bugs may go (default: every directory or top-level module with Python source outside test directories) */
    packageDirs: z.array(relDir).min(1).optional(),
    packageDirsExclude: z.array(relDir).default([]),
  })
  .strict();
export type SynthRepo = z.infer<typeof SynthRepoSchema>;

export const SynthInputSchema = z
  .object({
    /** names the run's work in the store (default: the workflow id) */
    synthId: z
      .string()
      .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/)
      .optional(),
    repos: z.array(SynthRepoSchema).min(1).max(256),
    /** the task set's directory (absolute: workers may run elsewhere) */
    outDir: z.string().refine((d) => d.startsWith('/'), 'must be an absolute path'),
    /** the factory's work (baselines, candidates, verdicts); default file://<outDir>/.work */
    storeUrl: z.string().min(1).optional(),
    /** validated tasks to write, over all repositories */
    max: z.number().int().min(1).max(1_000_000).default(100),
    seed: z
      .number()
      .int()
      .min(0)
      .max(2 ** 31)
      .default(0),
    strategies: z
      .array(z.enum(STRATEGIES))
      .min(1)
      .default([...STRATEGIES]),
    backend: z.enum(['docker', 'kubernetes']).default('docker'),
    /** sandboxes validating at once */
    concurrency: z.number().int().min(1).max(64).default(2),
    /** share of the tasks in the harder tier (2–3 bugs in different functions) */
    multiFraction: z.number().min(0).max(1).default(0.2),
    /** a candidate failing more tests than this is rejected */
    maxFailToPass: z.number().int().min(1).max(100_000).default(50),
    /** wrong fixes tried per task for its strength */
    strengthK: z.number().int().min(0).max(100).default(5),
    /** candidates per function */
    perFunction: z.number().int().min(1).max(1000).default(3),
    /** limit of one full test run, seconds (grading's, DeepSWE: 300) */
    timeoutS: z.number().int().min(10).max(7200).default(300),
    /** validation repositories (never in training): these, or a seeded share of the repositories */
    validation: z
      .object({ fraction: z.number().min(0).max(1).default(0.25), repos: z.array(z.string().min(1)).optional() })
      .strict()
      .prefault({}),
    /** an OpenAI-compatible server that rewrites each template statement as a user's bug report */
    issueWriter: z
      .object({ url: z.string().url(), model: z.string().min(1).optional() })
      .strict()
      .optional(),
    limits: z
      .object({
        cpus: z.number().gt(0).max(64),
        memoryBytes: z
          .number()
          .int()
          .min(8 << 20),
        pids: z.number().int().min(16),
        diskMiB: z.number().int().min(0),
      })
      .partial()
      .strict()
      .optional(),
  })
  .strict();
export type SynthInput = z.infer<typeof SynthInputSchema>;
export type SynthInputRaw = z.input<typeof SynthInputSchema>;

export function validateSynthInput(raw: unknown): { ok: true; input: SynthInput } | { ok: false; errors: string[] } {
  const r = SynthInputSchema.safeParse(raw);
  if (r.success) return { ok: true, input: r.data };
  return { ok: false, errors: formatIssues(r.error, raw, 'synth') };
}
