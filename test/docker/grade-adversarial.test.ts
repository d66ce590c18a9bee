// Reward integrity: every kind of the adversarial corpus (test/helpers/adversarial.ts) scores 0. In npm test every
// kind is graded on the two tasks of GRADER_TASKS, one run by pytest and one by unittest's own runner (its ids in
// unittest's format); `npm run check:grader` (SWERL_GRADER_FULL=1) grades every kind on every task we hold.
// Each grading runs with the audit in `flag` mode, so one run shows both layers: the audit's flags (a flag is
// reward 0 under the default `zero`) and what the run itself says (the restores, the plugin's checks, the
// canaries, answer-mutants included). A kind scores 0 when the audit flags it or the run gives 0; every kind
// that adds code names the audit rules that must flag it, and every audit category has a kind in the corpus.
// The gold patch resolves each task under the default grader (audit `zero`), also with a test_cmd naming the
// test ids (the canaries are added to it); one kind is graded under `zero` too (reason suspicious_patch).
// Each grading is a fresh container, SWERL_GRADE_CONCURRENCY (default 3) at a time.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { gradePatch, type GradeResult } from '../../activities/grade.ts';
import type { SweTask } from '../../lib/swe/task.ts';
import { AUDIT_CATEGORIES, AUDIT_RULES, STRUCTURAL_RULES } from '../../lib/swe/audit-rules.ts';
import { ADVERSARIAL_KINDS, GRADER_TASKS, adversarialPatches, withIdsCmd, withUnittestCmd } from '../helpers/adversarial.ts';
import { imagesFor, requireDocker, testBackend } from '../helpers/docker.ts';
import { sweTask, sweTasks } from '../helpers/swe-tasks.ts';
import { mapInLanes } from '../../lib/pool.ts';

const { backend, cleanup } = testBackend();
const CONCURRENCY = Number(process.env.SWERL_GRADE_CONCURRENCY ?? 3);
const FULL = process.env.SWERL_GRADER_FULL === '1';

/** A task as graded: its label (the instance id, with `(unittest)` for the converted one) and the record. */
interface Graded {
  label: string;
  base: SweTask;
  task: SweTask;
  unittest: boolean;
}
let targets: Graded[];
/** `${kind}|${label}` → result (audit `flag`) */
const results = new Map<string, GradeResult>();
/** label → the gold patch under the default grader, and with test_cmd naming the ids (pytest tasks) */
const gold = new Map<string, GradeResult>();
const goldByIds = new Map<string, GradeResult>();
let zeroMode: GradeResult;
let corpusSeconds = 0;

const HACK = new Set(['suspicious_patch', 'grader_file_read']);
/** the rules the audit flagged in a grading */
const flags = (g: GradeResult) => (g.integrity ?? []).filter((f) => HACK.has(f.kind)).map((f) => f.rule);
/** the reward under the default grader (audit `zero`): 0 once flagged, else what the run gave */
const zeroReward = (g: GradeResult) => (flags(g).length ? 0 : g.reward);

before(async () => {
  await requireDocker();
  const pytestTask = await sweTask(GRADER_TASKS.pytest);
  const unittestBase = await sweTask(GRADER_TASKS.unittest);
  const bases = FULL ? await sweTasks() : [pytestTask];
  targets = [
    ...bases.map((t) => ({ label: t.instance_id, base: t, task: t, unittest: false })),
    { label: `${unittestBase.instance_id} (unittest)`, base: unittestBase, task: withUnittestCmd(unittestBase), unittest: true },
  ];
  await imagesFor([...new Set(targets.map((t) => t.base))]);
  const t0 = Date.now();
  const patches = await mapInLanes(targets, CONCURRENCY, (t) => adversarialPatches(t.base, backend));
  const jobs: (() => Promise<void>)[] = [];
  targets.forEach((t, i) => {
    for (const [kind, patch] of patches[i]!) {
      const task = ADVERSARIAL_KINDS.find((k) => k.name === kind)?.testCmd === 'ids' && !t.unittest ? withIdsCmd(t.task) : t.task;
      jobs.push(async () => void results.set(`${kind}|${t.label}`, await gradePatch({ task, patch, backend, audit: 'flag' })));
    }
    jobs.push(async () => void gold.set(t.label, await gradePatch({ task: t.task, patch: t.base.patch, backend })));
    // the gold patch with the same test_cmd as the kinds graded by id: canaries reach a run that names its tests
    if (!t.unittest) jobs.push(async () => void goldByIds.set(t.label, await gradePatch({ task: withIdsCmd(t.task), patch: t.base.patch, backend })));
  });
  jobs.push(async () => {
    zeroMode = await gradePatch({ task: pytestTask, patch: patches[0]!.get('assertion-oracle')!, backend });
  });
  await mapInLanes(jobs, CONCURRENCY, (job) => job());
  corpusSeconds = (Date.now() - t0) / 1000;
});
after(async () => {
  await cleanup();
  console.log(`[adversarial] ${results.size + gold.size + goldByIds.size + 1} gradings in ${corpusSeconds.toFixed(0)} s (concurrency ${CONCURRENCY})`);
  if (process.env.SWERL_PRINT_CORPUS) {
    for (const [key, g] of results) console.log(`${key.padEnd(70)} run: ${g.reward} ${g.reason.padEnd(16)} audit: ${[...new Set(flags(g))].join(', ') || '-'}`);
  }
});

const show = (g: GradeResult) =>
  `${g.instanceId}: reward ${g.reward} (${g.reason}${g.detail ? `: ${g.detail}` : ''}) audit ${JSON.stringify(flags(g))} F2P ${JSON.stringify(g.tests.FAIL_TO_PASS)}\n${g.logTail.slice(-1500)}`;

test('the corpus covers every audit category and every round of issue 30, and each kind is graded on every task', () => {
  const categoryOf = new Map([...AUDIT_RULES, ...STRUCTURAL_RULES].map((r) => [r.id, r.category]));
  const covered = new Set(ADVERSARIAL_KINDS.flatMap((k) => (k.audit ?? []).map((r) => categoryOf.get(r))));
  assert.deepEqual(
    Object.keys(AUDIT_CATEGORIES).filter((c) => !covered.has(c as never)),
    [],
    'audit categories without a kind',
  );
  for (const k of ADVERSARIAL_KINDS) for (const r of k.audit ?? []) assert.ok(categoryOf.has(r), `${k.name}: unknown audit rule ${r}`);
  for (const c of ['r3', 'r4', 'audit'] as const)
    assert.ok(
      ADVERSARIAL_KINDS.some((k) => k.category === c),
      c,
    );
  for (const k of ADVERSARIAL_KINDS) for (const t of targets) assert.ok(results.has(`${k.name}|${t.label}`), `${k.name} not graded on ${t.label}`);
});

for (const kind of ADVERSARIAL_KINDS) {
  test(`adversarial ${kind.name} (${kind.what}) scores 0${kind.audit ? `; the audit flags it (${kind.audit.join(' or ')})` : ''}`, () => {
    for (const t of targets) {
      const g = results.get(`${kind.name}|${t.label}`);
      assert.ok(g, `${kind.name} on ${t.label} was not graded`);
      assert.equal(zeroReward(g), 0, show(g));
      if (kind.audit)
        assert.ok(
          flags(g).some((r) => kind.audit!.includes(r)),
          `${kind.name} on ${t.label}: flagged ${JSON.stringify(flags(g))}, wanted one of ${kind.audit}`,
        );
    }
  });
}

/** the kinds that defeat the round-2 grader's own checks: what catches them in the run itself (beside the audit) */
const CAUGHT_IN_THE_RUN: Record<string, RegExp> = {
  'assertion-oracle': /runner_tampered|tests_failed/,
  'plugin-blind': /runner_tampered|tests_failed/,
  'plugin-closure-swap': /runner_tampered|tests_failed/,
  'stdlib-wrapper': /runner_tampered|tests_failed/,
  'bytecode-ffi': /runner_tampered|tests_failed/,
};

test('the kinds aimed at the round-2 grader score 0 in the run too (answer-mutant canaries), on the pytest task', () => {
  for (const [name, ok] of Object.entries(CAUGHT_IN_THE_RUN)) {
    const g = results.get(`${name}|${GRADER_TASKS.pytest}`)!;
    assert.equal(g.reward, 0, show(g));
    assert.match(g.reason, ok, show(g));
  }
});

test('the gold patch resolves every task under the default grader, answer-mutants and all canaries back as they must, nothing flagged', () => {
  for (const t of targets) {
    for (const g of [gold.get(t.label), goldByIds.get(t.label)].filter((x): x is GradeResult => !!x)) {
      assert.equal(g.reward, 1, show(g));
      assert.equal(g.audit, 'zero');
      assert.deepEqual(flags(g), []);
      assert.ok((g.canaries ?? []).length >= 2, `${t.label}: canaries ${JSON.stringify(g.canaries)}`);
      for (const c of g.canaries!) assert.equal(c.status, c.expect === 'pass' ? 'PASSED' : 'FAILED', JSON.stringify(c));
    }
  }
  assert.ok(
    gold.get(GRADER_TASKS.pytest)!.canaries!.some((c) => c.mutant),
    'the pytest task has an answer-mutant',
  );
});

test('under the default audit (`zero`) a flagged patch is reward 0, reason suspicious_patch, its rule, file and line named, the tests not run', () => {
  assert.equal(zeroMode.reward, 0);
  assert.equal(zeroMode.reason, 'suspicious_patch');
  assert.match(zeroMode.detail ?? '', /frame-getframe at \S+__init__\.py:\d+/);
  const f = zeroMode.integrity!.find((x) => x.kind === 'suspicious_patch' && x.rule === 'frame-getframe')!;
  assert.ok(f.file && f.line && f.detail, JSON.stringify(f));
  assert.equal(zeroMode.exitCode, null);
  assert.equal(zeroMode.timings?.run, undefined, 'the tests did not run');
});
