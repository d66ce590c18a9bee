// Task loader: JSONL and parquet, both test-list encodings, bad records reported with line and field.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { filesInPatch, loadTasks, parseTestList } from '../../lib/swe/task.ts';
import { sweTasksFile } from '../helpers/swe-tasks.ts';

const dir = mkdtempSync(join(tmpdir(), 'swerl-tasks-'));
const TASKS_FILE = await sweTasksFile();
const lines = readFileSync(TASKS_FILE, 'utf8').trim().split('\n');

test("the repository's tasks file (data/swe/) loads its 10 tasks, tarball paths made absolute", async () => {
  const r = await loadTasks(TASKS_FILE);
  assert.equal(r.errors.length, 0);
  assert.equal(r.tasks.length, 10);
  for (const t of r.tasks) {
    assert.ok(t.source_tarball!.startsWith(dirname(TASKS_FILE)));
    assert.ok(t.FAIL_TO_PASS.length > 0);
  }
});

test('test lists: JSON arrays, JSON strings, Python literals with single quotes', () => {
  assert.deepEqual(parseTestList(['a', 'b']), ['a', 'b']);
  assert.deepEqual(parseTestList('["a", "b"]'), ['a', 'b']);
  assert.deepEqual(parseTestList("['t.py::A::b', 't.py::c[x-1]']"), ['t.py::A::b', 't.py::c[x-1]']);
  assert.deepEqual(parseTestList(`['it\\'s', "dq'uote", ]`), ["it's", "dq'uote"]);
  assert.deepEqual(parseTestList('[]'), []);
  assert.throws(() => parseTestList("['unterminated"), /unterminated/);
  assert.throws(() => parseTestList(3), /expected a list/);
});

test('a malformed line and a record missing a field are reported; the others load', async () => {
  const recs = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
  const pyList = { ...recs[1]!, FAIL_TO_PASS: `[${(recs[1]!.FAIL_TO_PASS as string[]).map((s) => `'${s}'`).join(', ')}]` };
  const missing = { ...recs[2]! };
  delete missing.test_cmd;
  const badList = { ...recs[3]!, PASS_TO_PASS: 42 };
  const out = [JSON.stringify(recs[0]), JSON.stringify(pyList), '{"instance_id": "broken", ', JSON.stringify(missing), JSON.stringify(badList), JSON.stringify(recs[0])];
  const f = join(dir, 'mixed.jsonl');
  writeFileSync(f, out.join('\n') + '\n');
  const r = await loadTasks(f);
  assert.deepEqual(
    r.tasks.map((t) => t.instance_id),
    [recs[0]!.instance_id, recs[1]!.instance_id],
  );
  assert.deepEqual(r.tasks[1]!.FAIL_TO_PASS, recs[1]!.FAIL_TO_PASS);
  const byLine = new Map(r.errors.map((e) => [e.line, e]));
  assert.match(byLine.get(3)!.message, /malformed JSON/);
  assert.equal(byLine.get(4)!.field, 'test_cmd');
  assert.equal(byLine.get(4)!.instanceId, recs[2]!.instance_id);
  assert.equal(byLine.get(5)!.field, 'PASS_TO_PASS');
  assert.equal(byLine.get(6)!.field, 'instance_id');
  assert.match(byLine.get(6)!.message, /duplicate .* line 1/);
});

test('parquet round trip (hyparquet-writer → loader)', async () => {
  const { parquetWriteBuffer } = (await import('hyparquet-writer')) as {
    parquetWriteBuffer: (o: { columnData: { name: string; data: unknown[]; type?: string }[] }) => ArrayBuffer;
  };
  const recs = lines.slice(0, 3).map((l) => JSON.parse(l) as Record<string, unknown>);
  const cols = ['instance_id', 'repo', 'base_commit', 'problem_statement', 'patch', 'test_patch', 'test_cmd', 'source_tarball', 'FAIL_TO_PASS', 'PASS_TO_PASS'];
  // SWE-bench's parquet exports keep the test lists as strings
  const columnData = cols.map((name) => ({
    name,
    type: 'STRING',
    data: recs.map((r) => (Array.isArray(r[name]) ? JSON.stringify(r[name]) : (r[name] as string))),
  }));
  const buf = parquetWriteBuffer({ columnData });
  const pq = join(dir, 'tasks.parquet');
  writeFileSync(pq, Buffer.from(buf));
  const r = await loadTasks(pq);
  assert.deepEqual(r.errors, []);
  assert.equal(r.tasks.length, 3);
  assert.deepEqual(r.tasks[2]!.PASS_TO_PASS, recs[2]!.PASS_TO_PASS);
  assert.equal(r.tasks[0]!.patch, recs[0]!.patch);
});

test('filesInPatch lists the b/ side of each file section', () => {
  const p = 'diff --git a/x/t.py b/x/t.py\n--- a/x/t.py\n+++ b/x/t.py\ndiff --git a/new.py b/new.py\n';
  assert.deepEqual(filesInPatch(p), ['x/t.py', 'new.py']);
});
