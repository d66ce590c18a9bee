// `swerl grade` end to end on the repository's tasks (data/swe/): the gold patches resolve all (reports in the harness's
// shape, read back by the official swebench package's own readers with the same counts and id lists),
// empty patches resolve none, unknown ids are refused by name.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { GRADER_VERSION } from '../../lib/swe/grading.ts';
import { imagesFor, requireDocker, testBackend } from '../helpers/docker.ts';
import { ADVERSARIAL_KINDS, adversarialPatches } from '../helpers/adversarial.ts';
import { sweTasks, sweTasksFile } from '../helpers/swe-tasks.ts';
import { assertSummariesAgree, harnessRunSummary } from '../helpers/swebench-harness.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'swerl-grade-cli-'));
const TASKS_FILE = await sweTasksFile();
let ids: string[] = [];

before(async () => {
  await requireDocker();
  const tasks = await sweTasks();
  ids = tasks.map((t) => t.instance_id).sort();
  await imagesFor(tasks);
});
after(() => rmSync(dir, { recursive: true, force: true }));

function swerl(...args: string[]) {
  return spawnSync(process.execPath, ['scripts/swerl.mjs', 'grade', '--tasks', TASKS_FILE, ...args], { cwd: ROOT, encoding: 'utf8', timeout: 900_000 });
}

test('--predictions gold: every task resolved; harness-shaped reports and summary', () => {
  const out = join(dir, 'gold');
  const r = swerl('--predictions', 'gold', '--out', out, '--concurrency', '3', '--run-id', 'cli');
  assert.equal(r.status, 0, r.stdout + r.stderr);
  assert.match(r.stdout, new RegExp(`Instances resolved: ${ids.length}\n`));
  const summary = JSON.parse(readFileSync(join(out, 'gold.cli.json'), 'utf8')) as Record<string, unknown>;
  assert.equal(summary.total_instances, ids.length);
  assert.equal(summary.resolved_instances, ids.length);
  assert.deepEqual(summary.resolved_ids, ids);
  assert.deepEqual(summary.error_ids, []);
  assert.equal(summary.schema_version, 2);
  assert.equal(summary.grader_version, GRADER_VERSION);
  for (const id of ids) {
    const inst = join(out, 'logs/run_evaluation/cli/gold', id);
    const rep = JSON.parse(readFileSync(join(inst, 'report.json'), 'utf8')) as Record<string, Record<string, unknown>>;
    assert.deepEqual(Object.keys(rep), [id]);
    const x = rep[id]!;
    assert.deepEqual(Object.keys(x).slice(0, 6), ['patch_is_None', 'patch_exists', 'patch_successfully_applied', 'resolved', 'infra_failure', 'tests_status']);
    assert.equal(x.resolved, true);
    const ts = x.tests_status as Record<string, { success: string[]; failure: string[] }>;
    assert.deepEqual(Object.keys(ts), ['FAIL_TO_PASS', 'PASS_TO_PASS', 'FAIL_TO_FAIL', 'PASS_TO_FAIL']);
    assert.equal(ts.FAIL_TO_PASS!.failure.length, 0);
    assert.ok(ts.FAIL_TO_PASS!.success.length > 0);
    assert.match(readFileSync(join(inst, 'test_output.txt'), 'utf8'), /passed/);
    assert.ok(existsSync(join(inst, 'patch.diff')));
  }
  harnessAgrees(out, 'cli', summary);
});

/** The official harness's own readers (swebench's get_predictions_from_file, make_run_report) on the directory give our counts and id lists. */
function harnessAgrees(out: string, runId: string, summary: Record<string, unknown>): void {
  assertSummariesAgree(summary, harnessRunSummary(out, TASKS_FILE, runId, join(dir, `harness-${runId}`)), runId);
}

test('empty and None patches resolve none and run no container; JSON dict format', () => {
  const preds = join(dir, 'empty.json');
  writeFileSync(preds, JSON.stringify(Object.fromEntries(ids.map((id, i) => [id, { model_name_or_path: 'org/empty', model_patch: i % 2 ? '' : null }]))));
  const out = join(dir, 'empty');
  const r = swerl('--predictions', preds, '--out', out);
  assert.equal(r.status, 0, r.stdout + r.stderr);
  const summary = JSON.parse(readFileSync(join(out, 'org__empty.swerl-grade.json'), 'utf8')) as Record<string, unknown>;
  assert.equal(summary.resolved_instances, 0);
  assert.equal(summary.empty_patch_instances, ids.length);
  assert.equal(summary.completed_instances, 0);
  assert.deepEqual(summary.resolved_ids, []);
  const rep = JSON.parse(readFileSync(join(out, 'logs/run_evaluation/swerl-grade/org__empty', ids[0]!, 'report.json'), 'utf8')) as Record<string, Record<string, unknown>>;
  assert.deepEqual(rep[ids[0]!], {
    patch_is_None: true,
    patch_exists: false,
    patch_successfully_applied: false,
    resolved: false,
    infra_failure: false,
    grader_version: GRADER_VERSION,
    reason: 'empty_patch',
  });
  harnessAgrees(out, 'swerl-grade', summary);
});

test('a flagged prediction: reward 0 and the rule, file and line printed; --audit flag runs the tests and still names the rule', async () => {
  const task = (await sweTasks()).find((x) => x.instance_id === ids[0])!;
  const { backend, cleanup } = testBackend();
  let patch: string;
  try {
    patch = (
      await adversarialPatches(
        task,
        backend,
        ADVERSARIAL_KINDS.filter((k) => k.name === 'assertion-oracle'),
      )
    ).get('assertion-oracle')!;
  } finally {
    await cleanup();
  }
  const preds = join(dir, 'hack.jsonl');
  writeFileSync(preds, JSON.stringify({ instance_id: task.instance_id, model_name_or_path: 'org/hack', model_patch: patch }) + '\n');
  for (const audit of ['zero', 'flag']) {
    const r = swerl('--predictions', preds, '--out', join(dir, `hack-${audit}`), '--audit', audit);
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /Instances resolved: 0\n/);
    assert.match(r.stdout, /Instances flagged by the integrity checks: 1\n/);
    assert.match(r.stdout, new RegExp(`  suspicious_patch ${task.instance_id}: frame-getframe at \\S+\\.py:\\d+: `));
    const grade = JSON.parse(readFileSync(join(dir, `hack-${audit}`, 'logs/run_evaluation/swerl-grade/org__hack', task.instance_id, 'grade.json'), 'utf8')) as {
      reason: string;
      audit: string;
    };
    assert.equal(grade.audit, audit);
    if (audit === 'zero') assert.equal(grade.reason, 'suspicious_patch');
    else assert.notEqual(grade.reason, 'suspicious_patch');
  }
  assert.match(swerl('--predictions', preds, '--out', join(dir, 'hack-bad'), '--audit', 'some').stderr, /--audit must be zero, flag or off, got "some"/);
});

test('a prediction for an unknown instance is refused by name; a malformed file names line and field', () => {
  const preds = join(dir, 'bad.jsonl');
  writeFileSync(
    preds,
    [
      JSON.stringify({ instance_id: ids[0], model_name_or_path: 'm', model_patch: '' }),
      JSON.stringify({ instance_id: 'nobody__nothing-1', model_name_or_path: 'm', model_patch: 'x' }),
    ].join('\n'),
  );
  const r = swerl('--predictions', preds, '--out', join(dir, 'bad'));
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /instance_id "nobody__nothing-1" is not a task in/);
  writeFileSync(preds, '{"instance_id": 3, "model_patch": "x"}\n');
  const r2 = swerl('--predictions', preds, '--out', join(dir, 'bad'));
  assert.notEqual(r2.status, 0);
  assert.match(r2.stderr, /line 1: field instance_id: .*\(got 3\)/);
});
