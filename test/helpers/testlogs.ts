// The recorded real logs (test/fixtures/testlogs/, checks/testlogs/record.ts) and what each run
// really did, in SWE-bench's id conventions (used by test/unit/testlog-real.test.ts and the agreement check).
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { TestLogFormat, TestStatus } from '../../lib/swe/testlog.ts';

export const TESTLOG_DIR = fileURLToPath(new URL('../fixtures/testlogs/', import.meta.url));
const DIR = TESTLOG_DIR;
const RANK: Record<string, number> = { SKIPPED: 0, XFAIL: 0, PASSED: 1, XPASS: 2, FAILED: 3, ERROR: 4 };

export function formatOfFixture(name: string): TestLogFormat {
  if (name.startsWith('task-') || name.includes('-pytest')) return 'pytest';
  if (name.endsWith('-unittest')) return 'unittest';
  if (name.endsWith('-django')) return 'django';
  if (name.endsWith('-sympy')) return 'sympy';
  throw new Error(`no format for fixture ${name}`);
}

/** The expected id → status of a fixture, from its recorded truth, in SWE-bench's id conventions. */
export function expectedOf(name: string): { expected: Map<string, TestStatus>; aliases: Set<string> } {
  const t = JSON.parse(readFileSync(`${DIR}${name}.truth.json`, 'utf8')) as { truth: unknown };
  const expected = new Map<string, TestStatus>();
  const aliases = new Set<string>();
  const worst = (id: string, s: TestStatus) => {
    const p = expected.get(id);
    if (p === undefined || RANK[s]! >= RANK[p]!) expected.set(id, s);
  };
  const fmt = formatOfFixture(name);
  if (fmt === 'pytest') {
    const log = readFileSync(`${DIR}${name}.log`, 'utf8');
    for (const [id, s] of Object.entries(t.truth as Record<string, string>)) {
      if (s === 'MISSING') continue;
      // without -v, -rA reports a skip by location ("SKIPPED [1] t.py:54: reason"): the log never names the test
      if (s === 'SKIPPED' && !log.includes(id)) continue;
      worst(id, s as TestStatus);
    }
  } else if (fmt === 'sympy') {
    for (const r of t.truth as { name: string; outcome: TestStatus }[]) worst(r.name, r.outcome);
  } else {
    for (const r of t.truth as { str: string; description: string; outcome: TestStatus }[]) {
      // the status line starts with the description's last line (the docstring's first line when there is one)
      const line = r.description.split('\n').at(-1)!;
      worst(line, r.outcome);
      if (line !== r.str) {
        worst(r.str, r.outcome);
        aliases.add(r.str);
      }
    }
  }
  return { expected, aliases };
}

export const FIXTURES = readdirSync(DIR)
  .filter((f) => f.endsWith('.log'))
  .map((f) => f.slice(0, -4))
  .sort();
