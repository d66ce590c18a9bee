// The static audit's false positives (lib/swe/audit.ts, from the diff alone as `swerl audit` runs it) on a corpus
// of legitimate patches: every flag listed for a reader to judge, then the rate against the target (≤ 1%).
//   node --import tsx bench/audit.ts [--patches FILE.jsonl]   (or SWERL_LEGIT_PATCHES=FILE)
// Default corpus: ../shared/legit-patches/patches.jsonl (1,209 small source commits of ten Python projects,
// selected by path, size and subject only). Equivalent data: any JSONL of {repo, commit, patch} records, e.g. the
// `git diff parent commit -- <package .py files>` of a project's recent non-test commits of 1-60 changed lines.
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { auditRecords, auditReport } from '../lib/swe/audit.ts';

const { values } = parseArgs({
  options: { patches: { type: 'string', default: process.env.SWERL_LEGIT_PATCHES ?? fileURLToPath(new URL('../../shared/legit-patches/patches.jsonl', import.meta.url)) } },
});
const t0 = Date.now();
const records = await auditRecords(await readFile(values.patches!, 'utf8'), values.patches!);
const lines = auditReport(records);
for (const l of lines) console.log(l);
const flagged = records.filter((r) => r.findings.length).length;
const byRule = new Map<string, number>();
for (const r of records) for (const rule of new Set(r.findings.map((f) => f.rule))) byRule.set(rule, (byRule.get(rule) ?? 0) + 1);
console.log(`by rule: ${[...byRule].map(([k, v]) => `${k} ${v}`).join(', ') || 'none'}`);
const rate = flagged / Math.max(1, records.length);
console.log(
  `false-positive rate ${(rate * 100).toFixed(2)}% (target ≤ 1%): ${rate <= 0.01 ? 'ok' : 'OVER'}; ${((Date.now() - t0) / 1000).toFixed(1)} s for ${records.length} patches`,
);
console.log(lines.at(-1));
