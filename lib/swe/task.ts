// SWE task records (DESIGN §3): the SWE-bench fields plus `image` or a recipe (`source_tarball`)
// and `test_cmd`. Loaders for JSONL and parquet; every record is validated with zod and a bad
// record is reported with its line (row) and field while the others still load.
import { readFile } from 'node:fs/promises';
import { dirname, isAbsolute, resolve } from 'node:path';
import { z } from 'zod';

/**
 * Test lists arrive as JSON arrays, as a string holding a JSON array, or as a string holding a
 * Python list literal with single quotes (SWE-bench / R2E-Gym exports).
 */
export function parseTestList(value: unknown): string[] {
  if (Array.isArray(value)) {
    if (!value.every((v) => typeof v === 'string')) throw new Error('list items must be strings');
    return value as string[];
  }
  if (typeof value !== 'string') throw new Error(`expected a list or a string holding one, got ${typeof value}`);
  const s = value.trim();
  if (s === '') return [];
  try {
    const j: unknown = JSON.parse(s);
    if (Array.isArray(j) && j.every((v) => typeof v === 'string')) return j as string[];
  } catch {
    // not JSON: try a Python literal below
  }
  return parsePythonStringList(s);
}

/** Parses `['a', "b\\'c"]` (a Python list of string literals) without eval. */
function parsePythonStringList(s: string): string[] {
  let i = 0;
  const out: string[] = [];
  const ws = () => {
    while (i < s.length && /\s/.test(s[i]!)) i++;
  };
  const fail = (what: string): never => {
    throw new Error(`not a list literal: ${what} at offset ${i} of ${JSON.stringify(s.slice(0, 80))}`);
  };
  ws();
  if (s[i] !== '[') fail("expected '['");
  i++;
  ws();
  if (s[i] === ']') return [];
  for (;;) {
    ws();
    const q = s[i];
    if (q !== "'" && q !== '"') fail('expected a quoted string');
    i++;
    let str = '';
    for (;;) {
      if (i >= s.length) fail('unterminated string');
      const c = s[i]!;
      if (c === '\\') {
        const n = s[i + 1];
        const map: Record<string, string> = { n: '\n', t: '\t', r: '\r', '\\': '\\', "'": "'", '"': '"' };
        if (n !== undefined && n in map) {
          str += map[n];
          i += 2;
          continue;
        }
        str += c;
        i++;
        continue;
      }
      if (c === q) {
        i++;
        break;
      }
      str += c;
      i++;
    }
    out.push(str);
    ws();
    if (s[i] === ',') {
      i++;
      ws();
      if (s[i] === ']') break;
      continue;
    }
    if (s[i] === ']') break;
    fail("expected ',' or ']'");
  }
  i++;
  ws();
  if (i !== s.length) fail('trailing text');
  return out;
}

const testList = z.unknown().transform((v, ctx) => {
  try {
    return parseTestList(v);
  } catch (e) {
    ctx.addIssue({ code: 'custom', message: (e as Error).message });
    return z.NEVER;
  }
});

/** Docker image names/tags and Kubernetes names are built from the id, so keep it tame. */
const instanceId = z
  .string()
  .min(1)
  .max(200)
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'only letters, digits, ".", "_", "-"');

export const SweTaskSchema = z
  .object({
    instance_id: instanceId,
    repo: z.string().min(1),
    base_commit: z.string().min(1),
    problem_statement: z.string().min(1),
    /** the gold fix */
    patch: z.string(),
    /** the tests the fix needs; empty when the repository's own tests at base are the task's (factory tasks) */
    test_patch: z.string().transform((s) => (s.trim() === '' ? '' : s)),
    FAIL_TO_PASS: testList,
    PASS_TO_PASS: testList,
    /** shell command run from /testbed that prints a log testlog.ts parses */
    test_cmd: z.string().min(1),
    /** an existing image to use as is */
    image: z.string().min(1).optional(),
    /** recipe: a tarball of the repository at base_commit (absolute after loading) */
    source_tarball: z.string().min(1).optional(),
    environment: z.string().optional(),
    test_files: testList.optional(),
    hints_text: z.string().nullish(),
    created_at: z.string().nullish(),
    version: z.union([z.string(), z.number()]).nullish(),
  })
  .loose()
  .refine((t) => t.image !== undefined || t.source_tarball !== undefined, {
    message: 'needs `image` or `source_tarball`',
    path: ['image'],
  });

export type SweTask = z.infer<typeof SweTaskSchema>;

export interface TaskLoadError {
  /** 1-based line (JSONL) or row (parquet) */
  line: number;
  /** dotted path of the bad field, '' for the whole record */
  field: string;
  message: string;
  instanceId?: string;
}

export interface LoadedTasks {
  tasks: SweTask[];
  errors: TaskLoadError[];
}

/** Validates one record; `baseDir` resolves a relative `source_tarball`. */
export function parseTaskRecord(raw: unknown, baseDir?: string): { task?: SweTask; errors: Omit<TaskLoadError, 'line'>[] } {
  const r = SweTaskSchema.safeParse(raw);
  const id = typeof raw === 'object' && raw !== null ? (raw as Record<string, unknown>).instance_id : undefined;
  if (!r.success) {
    return {
      errors: r.error.issues.map((iss) => ({
        field: iss.path.map(String).join('.'),
        message: iss.message,
        ...(typeof id === 'string' ? { instanceId: id } : {}),
      })),
    };
  }
  const task = r.data;
  if (task.source_tarball && baseDir && !isAbsolute(task.source_tarball)) {
    task.source_tarball = resolve(baseDir, task.source_tarball);
  }
  return { task, errors: [] };
}

function collect(records: { line: number; raw?: unknown; parseError?: string }[], baseDir: string): LoadedTasks {
  const tasks: SweTask[] = [];
  const errors: TaskLoadError[] = [];
  const seen = new Map<string, number>();
  for (const rec of records) {
    if (rec.parseError !== undefined) {
      errors.push({ line: rec.line, field: '', message: rec.parseError });
      continue;
    }
    const { task, errors: errs } = parseTaskRecord(rec.raw, baseDir);
    if (!task) {
      for (const e of errs) errors.push({ line: rec.line, ...e });
      continue;
    }
    const prev = seen.get(task.instance_id);
    if (prev !== undefined) {
      errors.push({
        line: rec.line,
        field: 'instance_id',
        message: `duplicate ${JSON.stringify(task.instance_id)} (first on line ${prev})`,
        instanceId: task.instance_id,
      });
      continue;
    }
    seen.set(task.instance_id, rec.line);
    tasks.push(task);
  }
  return { tasks, errors };
}

export function parseTasksJsonl(text: string, baseDir: string): LoadedTasks {
  const records: { line: number; raw?: unknown; parseError?: string }[] = [];
  text.split('\n').forEach((l, idx) => {
    if (l.trim() === '') return;
    try {
      records.push({ line: idx + 1, raw: JSON.parse(l) as unknown });
    } catch (e) {
      records.push({ line: idx + 1, parseError: `malformed JSON: ${(e as Error).message}` });
    }
  });
  return collect(records, baseDir);
}

export async function parseTasksParquet(bytes: Uint8Array, baseDir: string): Promise<LoadedTasks> {
  const { parquetReadObjects } = await import('hyparquet');
  const buf = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
  const rows = (await parquetReadObjects({ file: buf })) as Record<string, unknown>[];
  return collect(
    rows.map((raw, i) => ({ line: i + 1, raw: normaliseParquetRow(raw) })),
    baseDir,
  );
}

/** parquet nulls become absent fields; bigint versions become numbers */
function normaliseParquetRow(row: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(row)) {
    if (v === null || v === undefined) continue;
    out[k] = typeof v === 'bigint' ? Number(v) : v;
  }
  return out;
}

/** Loads a `.jsonl` / `.json` (one record a line) or `.parquet` file. */
export async function loadTasks(file: string): Promise<LoadedTasks> {
  const abs = resolve(file);
  const baseDir = dirname(abs);
  const bytes = await readFile(abs);
  if (abs.endsWith('.parquet')) return parseTasksParquet(bytes, baseDir);
  return parseTasksJsonl(bytes.toString('utf8'), baseDir);
}

/** Like loadTasks but fails on any bad record, naming each one. */
export async function loadTasksStrict(file: string): Promise<SweTask[]> {
  const { tasks, errors } = await loadTasks(file);
  if (errors.length) throw new Error(`${file}: ${errors.map(formatLoadError).join('; ')}`);
  return tasks;
}

export function formatLoadError(e: TaskLoadError): string {
  return `line ${e.line}${e.instanceId ? ` (${e.instanceId})` : ''}: field ${e.field || '(record)'}: ${e.message}`;
}

/** Files a unified diff touches (b/ side; a/ side for deletions), in order, without duplicates. */
export function filesInPatch(patch: string): string[] {
  const files: string[] = [];
  for (const m of patch.matchAll(/^diff --git a\/(\S+) b\/(\S+)$/gm)) {
    const f = m[2] ?? m[1]!;
    if (!files.includes(f)) files.push(f);
  }
  return files;
}
