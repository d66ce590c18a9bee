// Prints, as JSON, every recorded real log with its truth (SWE-bench id conventions), our parser's
// statuses, and for the repository's SWE tasks their FAIL_TO_PASS/PASS_TO_PASS lists and our verdict:
// the input of checks/swebench_agreement.py.
import { readFileSync } from 'node:fs';
import { parseTestLog } from '../../lib/swe/testlog.ts';
import { judgeTests, listedTests } from '../../lib/swe/grading.ts';
import { loadTasksStrict } from '../../lib/swe/task.ts';
import { buildSweTasks } from '../../scripts/build-swe-tasks.ts';
import { expectedOf, FIXTURES, formatOfFixture, TESTLOG_DIR } from '../../test/helpers/testlogs.ts';

const tasks = new Map((await loadTasksStrict(await buildSweTasks())).map((t) => [t.instance_id, t]));
const out: Record<string, unknown> = {};
for (const name of FIXTURES) {
  const log = readFileSync(`${TESTLOG_DIR}${name}.log`, 'utf8');
  const format = formatOfFixture(name);
  const ours = parseTestLog(log, format);
  const { expected, aliases } = expectedOf(name);
  // aliases (the name line above a docstring) are ours, not SWE-bench ids: not counted
  const rec: Record<string, unknown> = { format, truth: Object.fromEntries([...expected].filter(([id]) => !aliases.has(id))), ours: Object.fromEntries(ours) };
  const m = /^task-(.*)-(before|gold)$/.exec(name);
  if (m) {
    const t = tasks.get(m[1]!)!;
    const v = judgeTests(listedTests(t, ours));
    rec.task = { instance_id: t.instance_id, FAIL_TO_PASS: t.FAIL_TO_PASS, PASS_TO_PASS: t.PASS_TO_PASS, expect_resolved: m[2] === 'gold', ours_resolved: v.resolved };
  }
  out[name] = rec;
}
console.log(JSON.stringify(out));
