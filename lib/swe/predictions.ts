// SWE-bench predictions files (`instance_id`, `model_name_or_path`, `model_patch`) as the official
// harness reads them: JSONL, a JSON list, or a JSON dict keyed by instance id (SWE-agent's). Every
// record is validated with zod; errors name the record (line, index or key), the field and the value.
import { readFile } from 'node:fs/promises';
import { z } from 'zod';

export const PredictionSchema = z
  .object({
    instance_id: z.string().min(1),
    /** the harness requires it; a missing one becomes "unknown" so a bare list of patches still grades */
    model_name_or_path: z.string().min(1).default('unknown'),
    /** null: the model produced no patch (the harness's `patch_is_None`) */
    model_patch: z.string().nullable(),
  })
  .loose();

export type Prediction = z.infer<typeof PredictionSchema>;

export class PredictionsError extends Error {
  constructor(
    readonly source: string,
    readonly problems: string[],
  ) {
    super(`${source}: ${problems.join('; ')}`);
    this.name = 'PredictionsError';
  }
}

function show(v: unknown): string {
  const s = JSON.stringify(v);
  return s === undefined ? String(v) : s.length > 80 ? `${s.slice(0, 77)}...` : s;
}

/** Parses a predictions file's text; `source` names it in errors. Throws PredictionsError listing every bad record. */
export function parsePredictions(text: string, source = 'predictions'): Prediction[] {
  const records: { where: string; raw: unknown; key?: string }[] = [];
  const problems: string[] = [];
  let whole: unknown;
  let isWhole = false;
  try {
    whole = JSON.parse(text);
    isWhole = true;
  } catch {
    // not one JSON value: JSONL
  }
  const looksLikeOne = (v: unknown) => typeof v === 'object' && v !== null && !Array.isArray(v) && 'instance_id' in v;
  if (isWhole && Array.isArray(whole)) {
    whole.forEach((raw, i) => records.push({ where: `item ${i}`, raw }));
  } else if (isWhole && typeof whole === 'object' && whole !== null && !looksLikeOne(whole)) {
    for (const [key, raw] of Object.entries(whole)) records.push({ where: `key ${show(key)}`, raw, key });
  } else if (isWhole && looksLikeOne(whole)) {
    records.push({ where: 'line 1', raw: whole });
  } else {
    text.split('\n').forEach((l, i) => {
      if (l.trim() === '') return;
      try {
        records.push({ where: `line ${i + 1}`, raw: JSON.parse(l) as unknown });
      } catch (e) {
        problems.push(`line ${i + 1}: malformed JSON (${(e as Error).message})`);
      }
    });
  }
  const out: Prediction[] = [];
  const seen = new Map<string, string>();
  for (const { where, raw, key } of records) {
    // a dict value may leave out its own id
    const rec = key !== undefined && typeof raw === 'object' && raw !== null && !('instance_id' in raw) ? { ...raw, instance_id: key } : raw;
    const r = PredictionSchema.safeParse(rec);
    if (!r.success) {
      for (const iss of r.error.issues) {
        const field = iss.path.map(String).join('.') || '(record)';
        const value = iss.path.reduce<unknown>((v, k) => (typeof v === 'object' && v !== null ? (v as Record<string, unknown>)[k as string] : undefined), rec);
        problems.push(`${where}: field ${field}: ${iss.message} (got ${show(value)})`);
      }
      continue;
    }
    const p = r.data;
    if (key !== undefined && p.instance_id !== key) {
      problems.push(`${where}: field instance_id: ${show(p.instance_id)} differs from its key`);
      continue;
    }
    const first = seen.get(p.instance_id);
    if (first !== undefined) {
      problems.push(`${where}: field instance_id: duplicate ${show(p.instance_id)} (first at ${first})`);
      continue;
    }
    seen.set(p.instance_id, where);
    out.push(p);
  }
  if (problems.length) throw new PredictionsError(source, problems);
  return out;
}

export async function loadPredictions(file: string): Promise<Prediction[]> {
  return parsePredictions(await readFile(file, 'utf8'), file);
}

/** `--predictions gold`: each task's own patch under the model name "gold", as the harness does. */
export function goldPredictions(tasks: readonly { instance_id: string; patch: string }[]): Prediction[] {
  return tasks.map((t) => ({ instance_id: t.instance_id, model_name_or_path: 'gold', model_patch: t.patch }));
}

/** Fails naming every prediction whose instance id is not a task of the tasks file. */
export function checkPredictionIds(predictions: readonly Prediction[], taskIds: ReadonlySet<string>, tasksSource: string): void {
  const unknown = predictions.map((p) => p.instance_id).filter((id) => !taskIds.has(id));
  if (unknown.length) {
    throw new PredictionsError(
      'predictions',
      unknown.map((id) => `instance_id ${show(id)} is not a task in ${tasksSource}`),
    );
  }
}
