// Parsers against logs of real runs (test/fixtures/testlogs/, recorded by checks/testlogs/record.ts):
// pytest 6.0/7.2/8.3 (with and without -v), unittest on Python 3.9/3.11/3.13, Django 2.2/3.2/4.2's runner,
// sympy 1.7/1.11/1.13's runner, and the shared tasks' runs without and with the gold patch. Every test
// the run reported must be parsed with the status the run gave it (its truth, recorded by the run
// itself); nothing that only looks like a result (a test's own output) may be parsed as one.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseTestLog, type TestLogFormat, type TestStatus } from '../lib/swe/testlog.ts';

const DIR = fileURLToPath(new URL('./fixtures/testlogs/', import.meta.url));
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

test('the corpus covers every runner on every Python the fixtures were recorded on', () => {
  for (const rel of ['bullseye', 'bookworm', 'trixie']) {
    for (const runner of ['pytest', 'pytest-v', 'unittest', 'django', 'sympy']) assert.ok(FIXTURES.includes(`${rel}-${runner}`), `${rel}-${runner}`);
  }
  assert.equal(FIXTURES.filter((f) => f.startsWith('task-')).length, 16);
});

for (const name of FIXTURES) {
  test(`real log ${name}: every test with the status the run gave it`, () => {
    const log = readFileSync(`${DIR}${name}.log`, 'utf8');
    const { expected, aliases } = expectedOf(name);
    assert.ok(expected.size > 0);
    const parsed = parseTestLog(log, formatOfFixture(name));
    const wrong: string[] = [];
    for (const [id, s] of expected) if (parsed.get(id) !== s) wrong.push(`${JSON.stringify(id)}: parsed ${parsed.get(id) ?? 'MISSING'}, ran ${s}`);
    assert.deepEqual(wrong, [], wrong.join('\n'));
    if (!name.startsWith('task-')) {
      // the truth lists every test of the suite: anything else is output that looks like a result
      const truth = JSON.parse(readFileSync(`${DIR}${name}.truth.json`, 'utf8')) as { truth: unknown };
      const known = JSON.stringify(truth.truth);
      const extra = [...parsed.keys()].filter((id) => !expected.has(id) && !aliases.has(id) && !known.includes(JSON.stringify(id)));
      assert.deepEqual(extra, []);
    }
  });
}
