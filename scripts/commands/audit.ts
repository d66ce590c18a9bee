// `swerl audit --patches FILE.jsonl`: the grader's static audit (lib/swe/audit.ts) from each record's diff alone,
// conservatively (a construct counts as new unless the diff's removed or context lines show it). Records carry
// `patch` (a patch corpus) or `model_patch` (SWE-bench predictions). One line per flagged record, naming it by
// instance_id or repo@commit with the rule, file and line; the last line is `flagged: K of N`. Exit 0 (a report).
import type { Command } from 'commander';
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';

export function register(program: Command): void {
  program
    .command('audit')
    .description("the grader's static audit of what each patch adds, from the diff alone; `flagged: K of N` last")
    .requiredOption('--patches <file>', 'JSONL of records with a `patch` (or `model_patch`) field, named by instance_id or commit')
    .action(async (o: { patches: string }) => {
      const { auditRecords, auditReport } = await import('../../lib/swe/audit.ts');
      const file = resolve(o.patches);
      const records = await auditRecords(await readFile(file, 'utf8'), o.patches);
      for (const line of auditReport(records)) console.log(line);
    });
}
