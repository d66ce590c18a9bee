// npm run check:torch: the native engine against transformers (the oracle) and the FSDP engine on 1 and 2
// ranks against the native engine, on their own; prints the largest difference per config and quantity and
// exits 1 when one is over its tolerance (gpu-learner/fsdp/crosscheck.ts states them and why).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { formatRows, fsdpRows, oracleMutantRows, oracleRows } from '../gpu-learner/fsdp/crosscheck.ts';

const root = mkdtempSync(join(tmpdir(), 'check-torch-'));
try {
  const t0 = Date.now();
  const rows = [...(await oracleRows(root)), ...(await oracleMutantRows(root)), ...(await fsdpRows(root))];
  console.log(formatRows(rows));
  const over = rows.filter((r) => !r.ok);
  console.log(`\n${rows.length - over.length} ok (mutants: caught), ${over.length} not (${((Date.now() - t0) / 1000).toFixed(0)} s)`);
  process.exitCode = over.length ? 1 : 0;
} finally {
  rmSync(root, { recursive: true, force: true });
}
