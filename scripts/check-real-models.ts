// npm run check:real-models: both catalog models (SmolLM2-135M-Instruct, Qwen2.5-Coder-0.5B-Instruct) through every
// engine, on their own: `swerl model import` (or an import already made: --dir NAME=DIR), the oracle (native engine
// vs transformers), one AdamW step on the native and the FSDP engine from the same batch, and vLLM synced to a trained
// checkpoint verified by the probe (fp32 and bf16), llama-server serving the directory exported as a GGUF (`swerl model
// export-gguf`) verified by the same probe, and a one-task SWE evaluation through our policy server and through
// vLLM with 0 errors. Prints one table (scripts/checks/real-models.ts states the
// tolerances and why) and exits 1 when a row is over. The weights are Q4-dequantized GGUFs (lib/model-catalog.ts).
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { catalogModel, CATALOG_NAMES } from '../lib/model-catalog.ts';
import { importModel } from './model-import/index.ts';
import { formatRealRows, llamaProbeRows, oneTaskEval, realEngineStepRows, realOracleRows, vllmProbeRows, type OneTaskEval, type RealRow } from './checks/real-models.ts';
import { ensureCatalogGguf } from './model-import/fetch.ts';
import { startVllm } from '../services/vllm.ts';

const STEPS = ['oracle', 'fsdp', 'vllm-fp32', 'vllm-bf16', 'llama', 'eval-ours', 'eval-vllm'] as const;
const ArgsSchema = z.object({
  model: z.array(z.enum(CATALOG_NAMES as [string, ...string[]])).default([...CATALOG_NAMES]),
  dir: z
    .array(z.string().regex(/^[^=]+=.+$/, 'dir: expected NAME=DIR (an import already made)'))
    .default([])
    .transform((a) => new Map(a.map((s) => [s.slice(0, s.indexOf('=')), s.slice(s.indexOf('=') + 1)]))),
  skip: z.array(z.enum(STEPS)).default([]),
});

const { values } = parseArgs({ options: { model: { type: 'string', multiple: true }, dir: { type: 'string', multiple: true }, skip: { type: 'string', multiple: true } } });
const parsed = ArgsSchema.safeParse(values);
if (!parsed.success) {
  console.error(`check:real-models: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  process.exit(2);
}
const args = parsed.data;
const root = mkdtempSync(join(tmpdir(), 'check-real-models-'));
const rows: RealRow[] = [];
const timings: string[] = [];
const evals: string[] = [];
const failures: string[] = [];
// a one-task evaluation passes when it ends with 0 errors (every episode an outcome with its end reason)
const evalLine = (what: string, e: OneTaskEval): string => {
  const format = /^tool format: .*$/m.exec(e.summary)?.[0] ?? 'tool format: not reported';
  if (e.errors > 0 || e.completed !== 1) failures.push(`${what}: ${e.errors} errors, ${e.completed} completed`);
  return `eval  ${what}: ${e.errors} errors, end ${e.end} after ${e.steps} steps (${e.api}, ${e.responseTokens} tokens, ${e.seconds.toFixed(0)} s); ${format}`;
};
// each step's rows and time printed as soon as it ends (a long check stopped halfway keeps what it measured)
const timed = async <T>(what: string, f: () => Promise<T>): Promise<T> => {
  const t0 = Date.now();
  const r = await f();
  timings.push(`${what}: ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  const stepRows = Array.isArray(r) ? (r as RealRow[]) : ((r as { rows?: RealRow[] }).rows ?? []);
  console.log(`${stepRows.length ? `${formatRealRows(stepRows)}\n` : ''}${timings.at(-1)}`);
  return r;
};
try {
  for (const name of args.model) {
    const m = catalogModel(name);
    const label = `${m.title.replace(/-Instruct$/, '')} (${m.gguf.quantization} deq.)`;
    let dir = args.dir.get(name);
    if (!dir) {
      dir = join(root, name);
      await timed(`${name} import (fp32)`, () => importModel({ from: name, out: dir!, dtype: 'float32' }));
    }
    const work = join(root, `${name}-work`);
    mkdirSync(work, { recursive: true });
    const skip = new Set(args.skip);
    if (!skip.has('oracle')) rows.push(...(await timed(`${name} oracle`, () => realOracleRows(dir!, join(work, 'oracle'), label))));
    if (!skip.has('fsdp')) rows.push(...(await timed(`${name} native + FSDP step`, () => realEngineStepRows(dir!, join(work, 'step'), label))));
    for (const dtype of ['float32', 'bfloat16'] as const) {
      if (skip.has(dtype === 'float32' ? 'vllm-fp32' : 'vllm-bf16')) continue;
      const r = await timed(`${name} vLLM ${dtype}`, () => vllmProbeRows(dir!, join(work, `vllm-${dtype}`), label, { dtype }));
      timings.push(`  vLLM started in ${r.startSeconds.toFixed(0)} s, reloaded checkpoint 1 in ${r.syncSeconds.toFixed(1)} s`);
      rows.push(...r.rows);
    }
    if (!skip.has('llama')) {
      const quantizedGguf = await ensureCatalogGguf(m, process.env.SWERL_PYTHON ?? 'python3');
      const r = await timed(`${name} llama-server (exported GGUF)`, () => llamaProbeRows(dir!, join(work, 'llama'), label, { quantizedGguf }));
      timings.push(`  exported to GGUF (f32) in ${r.exportSeconds.toFixed(0)} s`);
      rows.push(...r.rows);
    }
    if (!skip.has('eval-ours'))
      evals.push(evalLine(`${label}, our policy server`, await timed(`${name} eval (ours)`, () => oneTaskEval({ path: dir!, toolFormat: 'auto' }, join(work, 'eval-ours')))));
    if (!skip.has('eval-vllm')) {
      const vllm = await startVllm({ model: dir, servedModelName: 'policy', dtype: 'float32', maxModelLen: 2048, logFile: join(work, 'vllm-eval.log') });
      try {
        const model = { baseUrl: vllm.url, model: 'policy', api: 'completions' as const, tokenizer: dir, toolFormat: 'auto' as const };
        evals.push(evalLine(`${label}, vLLM fp32`, await timed(`${name} eval (vLLM)`, () => oneTaskEval(model, join(work, 'eval-vllm')))));
      } finally {
        await vllm.close();
      }
    }
    console.log(formatRealRows(rows.filter((r) => r.config.startsWith(label))));
  }
  console.log(`\n${formatRealRows(rows)}\n\n${evals.join('\n')}\n\n${timings.join('\n')}`);
  const over = rows.filter((r) => !r.ok);
  console.log(`\n${rows.length - over.length} ok (mutants: caught), ${over.length} not; ${evals.length - failures.length} evaluations with 0 errors, ${failures.length} not`);
  process.exitCode = over.length || failures.length ? 1 : 0;
} finally {
  if (!process.env.KEEP_TEST_DIRS) rmSync(root, { recursive: true, force: true });
}
