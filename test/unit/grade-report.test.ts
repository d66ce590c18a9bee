// The pure side of grading: verdict rules, harness-shaped reports and the run summary, the predictions loader.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GRADER_VERSION, judgeTests, listedTests, type GradeResult, type TestOutcome } from '../../lib/swe/grading.ts';
import { instanceReport, runSummary, reportJson, modelDirName } from '../../lib/swe/report.ts';
import { checkPredictionIds, goldPredictions, parsePredictions, PredictionsError } from '../../lib/swe/predictions.ts';

const task = { instance_id: 'o__r-1', FAIL_TO_PASS: ['t.py::f1', 't.py::f2'], PASS_TO_PASS: ['t.py::p1', 't.py::p2'] };

function grade(statuses: Record<string, TestOutcome>, over: Partial<GradeResult> = {}): GradeResult {
  const tests = listedTests(task, new Map(Object.entries(statuses)));
  const resolved = judgeTests(tests).resolved;
  return {
    instanceId: task.instance_id,
    reward: resolved ? 1 : 0,
    resolved,
    reason: resolved ? 'passed' : 'tests_failed',
    patchExists: true,
    patchApplied: true,
    tests,
    graderVersion: GRADER_VERSION,
    channel: 'pytest-plugin',
    restored: [],
    exitCode: 0,
    durationS: 1,
    logTail: '',
    image: 'img',
    ...over,
  };
}

test('FAIL_TO_PASS: only PASSED succeeds (XFAIL, XPASS, SKIPPED, MISSING, FAILED, ERROR fail)', () => {
  for (const s of ['XFAIL', 'XPASS', 'SKIPPED', 'MISSING', 'FAILED', 'ERROR'] as TestOutcome[]) {
    const v = judgeTests(
      listedTests(
        task,
        new Map<string, TestOutcome>([
          ['t.py::f1', 'PASSED'],
          ['t.py::f2', s],
          ['t.py::p1', 'PASSED'],
          ['t.py::p2', 'PASSED'],
        ]),
      ),
    );
    assert.equal(v.resolved, false, s);
    assert.deepEqual(v.FAIL_TO_PASS.failure, ['t.py::f2'], s);
  }
});

test('PASS_TO_PASS as SWE-bench 5: SKIPPED and XFAIL maintained; FAILED, ERROR, MISSING, XPASS fail', () => {
  for (const [s, ok] of [
    ['SKIPPED', true],
    ['XFAIL', true],
    ['PASSED', true],
    ['FAILED', false],
    ['ERROR', false],
    ['MISSING', false],
    ['XPASS', false],
  ] as [TestOutcome, boolean][]) {
    const v = judgeTests(
      listedTests(
        task,
        new Map<string, TestOutcome>([
          ['t.py::f1', 'PASSED'],
          ['t.py::f2', 'PASSED'],
          ['t.py::p1', s],
          ['t.py::p2', 'PASSED'],
        ]),
      ),
    );
    assert.equal(v.resolved, ok, s);
  }
});

test('instance report in the harness shape', () => {
  const g = grade({ 't.py::f1': 'PASSED', 't.py::f2': 'XFAIL', 't.py::p1': 'SKIPPED', 't.py::p2': 'FAILED' });
  const r = instanceReport({ instance_id: task.instance_id, model_patch: 'diff' }, g);
  assert.deepEqual(Object.keys(r), [task.instance_id]);
  const x = r[task.instance_id]!;
  assert.deepEqual(
    { ...x, grader_version: undefined, reason: undefined },
    {
      patch_is_None: false,
      patch_exists: true,
      patch_successfully_applied: true,
      resolved: false,
      infra_failure: false,
      tests_status: {
        FAIL_TO_PASS: { success: ['t.py::f1'], failure: ['t.py::f2'] },
        PASS_TO_PASS: { success: ['t.py::p1'], failure: ['t.py::p2'] },
        FAIL_TO_FAIL: { success: [], failure: [] },
        PASS_TO_FAIL: { success: [], failure: [] },
      },
      grader_version: undefined,
      reason: undefined,
    },
  );
  assert.equal(x.grader_version, GRADER_VERSION);
  // None and empty patches: the harness's flags, and which grader scored them 0
  assert.deepEqual(instanceReport({ instance_id: 'a', model_patch: null })['a'], {
    patch_is_None: true,
    patch_exists: false,
    patch_successfully_applied: false,
    resolved: false,
    infra_failure: false,
    grader_version: GRADER_VERSION,
    reason: 'empty_patch',
  });
  assert.equal(instanceReport({ instance_id: 'a', model_patch: ' \n' })['a']!.grader_version, GRADER_VERSION);
  const applyFailed = instanceReport({ instance_id: task.instance_id, model_patch: 'x' }, grade({}, { patchApplied: false, reason: 'patch_apply_failed' }))[task.instance_id]!;
  assert.equal(applyFailed.patch_successfully_applied, false);
  assert.equal(applyFailed.tests_status, undefined);
  assert.throws(() => instanceReport({ instance_id: 'other', model_patch: 'x' }, grade({})), /grade is for/);
  assert.equal(reportJson({ a: 1 }), '{\n    "a": 1\n}\n');
  assert.equal(modelDirName('org/model'), 'org__model');
});

test('run summary: counts and sorted id lists as make_run_report', () => {
  const ok = instanceReport(
    { instance_id: 'b', model_patch: 'd' },
    { ...grade({ 't.py::f1': 'PASSED', 't.py::f2': 'PASSED', 't.py::p1': 'PASSED', 't.py::p2': 'PASSED' }), instanceId: 'b' },
  )['b']!;
  const bad = instanceReport({ instance_id: 'a', model_patch: 'd' }, { ...grade({}), instanceId: 'a' })['a']!;
  const s = runSummary({
    datasetIds: ['a', 'b', 'c', 'd', 'e', 'f'],
    predictions: [
      { instance_id: 'b', model_patch: 'd' },
      { instance_id: 'a', model_patch: 'd' },
      { instance_id: 'c', model_patch: null },
      { instance_id: 'd', model_patch: ' ' },
      { instance_id: 'e', model_patch: 'd' },
    ],
    reports: new Map([
      ['a', bad],
      ['b', ok],
    ]),
    errors: new Map([['e', 'sandbox could not start']]),
    graderVersion: GRADER_VERSION,
  });
  assert.deepEqual(
    { ...s },
    {
      total_instances: 6,
      submitted_instances: 5,
      completed_instances: 2,
      resolved_instances: 1,
      unresolved_instances: 1,
      empty_patch_instances: 2,
      error_instances: 1,
      completed_ids: ['a', 'b'],
      incomplete_ids: ['f'],
      empty_patch_ids: ['c', 'd'],
      submitted_ids: ['a', 'b', 'c', 'd', 'e'],
      resolved_ids: ['b'],
      unresolved_ids: ['a'],
      error_ids: ['e'],
      error_reasons: { e: 'sandbox could not start' },
      grader_version: GRADER_VERSION,
      schema_version: 2,
    },
  );
});

test('predictions: JSONL, JSON list and JSON dict load the same', () => {
  const recs = [
    { instance_id: 'a', model_name_or_path: 'm', model_patch: 'diff a' },
    { instance_id: 'b', model_name_or_path: 'm', model_patch: null, extra: 1 },
  ];
  const jsonl = recs.map((r) => JSON.stringify(r)).join('\n') + '\n';
  const list = JSON.stringify(recs);
  const dict = JSON.stringify({ a: recs[0], b: { model_name_or_path: 'm', model_patch: null, extra: 1 } });
  for (const text of [jsonl, list, dict]) {
    const p = parsePredictions(text);
    assert.deepEqual(
      p.map((x) => [x.instance_id, x.model_name_or_path, x.model_patch]),
      [
        ['a', 'm', 'diff a'],
        ['b', 'm', null],
      ],
    );
  }
  // one prediction as a single JSON object (a one-line JSONL file)
  assert.equal(parsePredictions(JSON.stringify(recs[0]))[0]!.instance_id, 'a');
  assert.equal(parsePredictions('{"instance_id":"x","model_patch":""}')[0]!.model_name_or_path, 'unknown');
});

test('predictions: bad records are named by line/item/key, field and value; all are listed', () => {
  const text = ['{"instance_id":"a","model_name_or_path":"m","model_patch":"d"}', '{"instance_id":"b","model_patch":3}', 'not json', '{"instance_id":"a","model_patch":"d2"}'].join(
    '\n',
  );
  assert.throws(
    () => parsePredictions(text, 'p.jsonl'),
    (e: unknown) => {
      assert.ok(e instanceof PredictionsError);
      assert.match(e.message, /^p\.jsonl: /);
      assert.match(e.message, /line 2: field model_patch: .* \(got 3\)/);
      assert.match(e.message, /line 3: malformed JSON/);
      assert.match(e.message, /line 4: field instance_id: duplicate "a" \(first at line 1\)/);
      return true;
    },
  );
  assert.throws(() => parsePredictions('[{"model_patch":"d"}]'), /item 0: field instance_id: .*got undefined/);
  assert.throws(() => parsePredictions('{"a":{"instance_id":"b","model_patch":"d"}}'), /key "a": field instance_id: "b" differs from its key/);
});

test('predictions: ids not in the tasks file are errors naming them; gold predictions', () => {
  const preds = parsePredictions('[{"instance_id":"a","model_patch":"d"},{"instance_id":"zz","model_patch":"d"}]');
  assert.throws(() => checkPredictionIds(preds, new Set(['a']), 'tasks.jsonl'), /instance_id "zz" is not a task in tasks\.jsonl/);
  assert.deepEqual(goldPredictions([{ instance_id: 'a', patch: 'p' }]), [{ instance_id: 'a', model_name_or_path: 'gold', model_patch: 'p' }]);
});
