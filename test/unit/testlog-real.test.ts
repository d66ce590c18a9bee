// Parsers against logs of real runs (test/fixtures/testlogs/, recorded by checks/testlogs/record.ts):
// pytest 6.0/7.2/8.3 (with and without -v), unittest on Python 3.9/3.11/3.13, Django 2.2/3.2/4.2's runner,
// sympy 1.7/1.11/1.13's runner, and the repository's SWE tasks' runs without and with the gold patch. Every test
// the run reported must be parsed with the status the run gave it (its truth, recorded by the run
// itself); nothing that only looks like a result (a test's own output) may be parsed as one.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { parseTestLog } from '../../lib/swe/testlog.ts';
import { pluginRunContradictions, readPluginRecords } from '../../lib/swe/pytest-results.ts';
import { expectedOf, FIXTURES, formatOfFixture, TESTLOG_DIR as DIR } from '../helpers/testlogs.ts';

test('the corpus covers every runner on every Python the fixtures were recorded on', () => {
  for (const rel of ['bullseye', 'bookworm', 'trixie']) {
    for (const runner of ['pytest', 'pytest-v', 'unittest', 'django', 'sympy']) assert.ok(FIXTURES.includes(`${rel}-${runner}`), `${rel}-${runner}`);
  }
  assert.equal(FIXTURES.filter((f) => f.startsWith('task-')).length, 20);
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

for (const name of FIXTURES.filter((f) => existsSync(`${DIR}${f}.plugin.jsonl`))) {
  test(`results plugin on the real run ${name}: every test, skips included, with the status the run gave it`, () => {
    const run = readPluginRecords(readFileSync(`${DIR}${name}.plugin.jsonl`, 'utf8'));
    const truth = JSON.parse(readFileSync(`${DIR}${name}.truth.json`, 'utf8')) as { truth: Record<string, string>; recorded: { exit: number } };
    assert.deepEqual(Object.fromEntries([...run.statuses].sort()), Object.fromEntries(Object.entries(truth.truth).sort()));
    assert.deepEqual(pluginRunContradictions({ run, exitCode: truth.recorded.exit, patchedFiles: new Set() }), []);
  });
}
