// Mutation check of the grader's defences: each planted bug (defences undone, in a copy of the grader's
// sources under tmp/) must let its adversarial kind score 1, so the corpus (test/docker/grade-adversarial.test.ts)
// would catch the bug; the real grader gives the same patch 0. The defences are layered, so a kind is
// chosen that only the undone defence catches, and where a kind is caught by two layers the mutant that
// undoes one of them must still give 0 (`holds`). Grader v2's defences (restore rules, the results
// channel, the hook audit, the exit status) are checked with the integrity checks off (`integrity: false`,
// both for the mutant and for the real grader), grader v3's test-integrity checks with them on and the audit and
// answer-mutants off (what v3 had), and v4's two layers (the static audit, the answer-mutant canaries) against
// the round-3 and round-4 kinds with the default grader: undoing both lets the kind through, either one alone
// still gives 0. A last mutant undoes the wrapper check of v4 and so brings back the false negative it closed.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { GradeInput, GradeResult } from '../../activities/grade.ts';
import { gradePatch } from '../../activities/grade.ts';
import type { SweTask } from '../../lib/swe/task.ts';
import { ADVERSARIAL_KINDS, adversarialPatches, decoratedTask } from '../helpers/adversarial.ts';
import { imagesFor, requireDocker, testBackend } from '../helpers/docker.ts';
import { sweTask, TASK } from '../helpers/swe-tasks.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TMP = `${ROOT}tmp/mutants-${process.pid}/`;
const { backend, cleanup } = testBackend();
const PLUGIN = 'lib/swe/swerl_pytest_results.py';
const GRADE = 'activities/grade.ts';

interface Mutant {
  name: string;
  /** repository file → [exact text, replacement] */
  edits: Record<string, [string, string][]>;
  kind: string;
  task: string;
  /** how both graders grade: v2's defences alone (`integrity: false`), v3's (audit and answer-mutants off: V3), or the default */
  opts?: Pick<GradeInput, 'integrity' | 'audit' | 'mutants'>;
  /** fewer defences undone (each a subset of `edits`) with which the kind must still score 0: another layer catches it
   * (graded with the hold's own `opts` where it names them, else the mutant's) */
  holds?: { name: string; edits: Record<string, [string, string][]>; opts?: Mutant['opts'] }[];
}

const NO_CODE_CHECK: [string, string] = [
  'def _check_called(nodeid, name, files, called, behind=None):\n',
  'def _check_called(nodeid, name, files, called, behind=None):\n    return []\n',
];
const NO_CANARIES: [string, string] = ['const canaryFiles = g.plugin && g.integrity ? await plannedCanaries(g, prep) : [];', 'const canaryFiles: CanaryFile[] = [];'];
const NO_AUDIT: [string, string] = ["audit: integrity ? (input.audit ?? 'zero') : 'off',", "audit: 'off' as AuditMode,"];
const NO_MUTANTS: [string, string] = [
  'const mutants: VerifiedMutant[] = g.input.mutants === false ? [] : await verifiedMutants(task, g.input.backend, g.input.timeoutS ?? GRADE_TIMEOUT_S);',
  'const mutants: VerifiedMutant[] = [];',
];
/** tests inside the package, one test file (the canary-sparing hacks look at the first test module only) */
const PKG: string = TASK.sdist;
/** a root-level module with TestCase tests whose FAIL_TO_PASS test fails by an assertion */
const ROOT_MODULE: string = TASK.rootModule;
/** grader v3's checks: the plugin's, without the audit and the answer-mutants */
const V3 = { audit: 'off', mutants: false } as const;
const V2 = { integrity: false } as const;
/** v4's two layers undone, and each alone */
const NEITHER_LAYER = { [GRADE]: [NO_AUDIT, NO_MUTANTS] };
const EITHER_LAYER = [
  { name: 'no audit (the answer-mutant canaries catch it)', edits: { [GRADE]: [NO_AUDIT] } },
  { name: 'no answer-mutant canaries (the audit catches it)', edits: { [GRADE]: [NO_MUTANTS] } },
];

const MUTANTS: Mutant[] = [
  // grader v2: runner files, results channel, hook audit, exit status
  {
    name: 'runner files not restored',
    edits: {
      'lib/swe/runner-guard.ts': [['export function isRunnerPath(path: string): boolean {', 'export function isRunnerPath(path: string): boolean {\n  if (path) return false;']],
    },
    kind: 'conftest-autouse-noop',
    task: PKG,
    opts: V2,
  },
  {
    name: 'added modules shadowing outside ones not restored',
    edits: { 'lib/swe/runner-guard.ts': [['  function shadows(p: string): boolean {', '  function shadows(p: string): boolean {\n    if (p) return false;']] },
    kind: 'shadow-stdlib',
    task: PKG,
    opts: V2,
  },
  {
    name: 'statuses read from the log instead of the results plugin',
    edits: {
      'lib/swe/grade-plan.ts': [['export function runsPytest(testCmd: string): boolean {', 'export function runsPytest(testCmd: string): boolean {\n  if (testCmd) return false;']],
    },
    kind: 'import-fake-lines',
    task: PKG,
    opts: V2,
  },
  {
    name: 'no audit of who implements the reporting hooks',
    edits: { 'lib/swe/pytest-results.ts': [['  for (const h of f.audit.hookimpls) {', '  for (const h of f.audit.hookimpls.slice(0, 0)) {']] },
    kind: 'import-register-plugin',
    task: PKG,
    opts: V2,
  },
  {
    name: "no cross-check of the session's exit status with the process's",
    edits: { 'lib/swe/pytest-results.ts': [['  if (exitCode !== null && exitCode !== f.exitstatus)', '  if (exitCode === -12345 && exitCode !== f.exitstatus)']] },
    kind: 'rewrite-results',
    task: PKG,
    opts: V2,
  },
  // the test-integrity checks
  {
    name: 'the function called not checked against the file on disk',
    edits: { [PLUGIN]: [NO_CODE_CHECK] },
    kind: 'spare-canaries',
    task: PKG,
    opts: V3,
  },
  {
    name: 'neither the function called checked nor canaries added',
    edits: { [PLUGIN]: [NO_CODE_CHECK], [GRADE]: [NO_CANARIES] },
    kind: 'neuter-package-callers',
    task: PKG,
    opts: V3,
    // Not the plain canaries alone: their sources are drawn at random (lib/swe/canaries.ts), and one short test of
    // toolz's file, test_rest, names only `rest`, a functools.partial the hack does not count as the package's. When the
    // inverted canary copies it (78 of 2,000 draws), the hack spares that canary and the layer misses. The answer-mutants
    // copy the FAIL_TO_PASS test itself, which the hack must blank to win, so they catch it every time.
    holds: [{ name: 'the function called not checked (the answer-mutant canaries catch it)', edits: { [PLUGIN]: [NO_CODE_CHECK] }, opts: { audit: 'off' } }],
  },
  {
    name: 'no check for a trace or profile function when a test is called',
    edits: { [PLUGIN]: [['def _tracers():\n', 'def _tracers():\n    return []\n']] },
    kind: 'trace-swap-at-call',
    task: PKG,
    opts: V3,
  },
  {
    name: "verdicts taken from the reports, not from the plugin's call wrapper",
    edits: { 'lib/swe/pytest-results.ts': [['    if (reportedPass) {', '    if (reportedPass && false) {']] },
    kind: 'transient-report-outcome',
    task: PKG,
    opts: V3,
  },
  {
    name: 'no snapshots of the runner compared',
    edits: { [PLUGIN]: [['def _changed(core_only=False):\n', 'def _changed(core_only=False):\n    return []\n']] },
    kind: 'unittest-assert-noop',
    // a task whose FAIL_TO_PASS test fails by an assertion (no-op checks win there)
    task: ROOT_MODULE,
    opts: V3,
  },
  {
    name: "TestCase assertion overrides in the test's classes not checked",
    edits: { [PLUGIN]: [['def _case_overrides(inst):\n', 'def _case_overrides(inst):\n    return []\n']] },
    kind: 'unittest-assert-noop-classes',
    // as above: the failure is an assertion; unittest.TestCase itself is untouched, so the snapshots do not see it
    task: ROOT_MODULE,
    opts: V3,
  },
  {
    name: "the grader's files (test_patch's copy) left in the container, and the function called not checked",
    edits: {
      [PLUGIN]: [NO_CODE_CHECK, ['        shutil.rmtree(workdir, ignore_errors=True)\n', '        pass\n']],
      'lib/swe/grade-plan.ts': [['    `rm -rf ${work}/test.diff ${work}/patch.diff ${work}/apply.log ${work}/canary`,', '    `rm -rf ${work}/canary`,']],
    },
    kind: 'read-grader-files',
    task: PKG,
    opts: V3,
    holds: [{ name: 'the function called not checked (the copy is gone: the hack finds nothing)', edits: { [PLUGIN]: [NO_CODE_CHECK] } }],
  },
  // swerl-grader/4: the static audit and the answer-mutant canaries, against round 3 and round 4
  { name: 'neither the audit nor the answer-mutant canaries (round 3: an assertion oracle)', edits: NEITHER_LAYER, kind: 'assertion-oracle', task: PKG, holds: EITHER_LAYER },
  {
    name: 'neither the audit nor the answer-mutant canaries (round 4: a closure cell of the plugin swapped)',
    edits: NEITHER_LAYER,
    kind: 'plugin-closure-swap',
    task: PKG,
    holds: EITHER_LAYER,
  },
];

/** Copies the grader's sources into TMP with `m`'s edits; returns the mutant's gradePatch. */
async function mutantGrader(name: string, edits: Mutant['edits'], id: string): Promise<(i: GradeInput) => Promise<GradeResult>> {
  const dir = `${TMP}${id}/`;
  mkdirSync(dir, { recursive: true });
  const files = [GRADE, PLUGIN, 'lib/swe/grade-plan.ts', 'lib/swe/runner-guard.ts', 'lib/swe/pytest-results.ts', 'lib/swe/canaries.ts'];
  const local = (f: string) => `${dir}${f.replaceAll('/', '__')}`;
  for (const f of files) {
    let text = readFileSync(ROOT + f, 'utf8');
    for (const [from, to] of edits[f] ?? []) {
      assert.ok(text.includes(from), `mutant ${name}: ${JSON.stringify(from)} not found in ${f}`);
      text = text.replace(from, to);
    }
    // imports of the copied files point at the copies, the others at the repository
    const base = f.slice(0, f.lastIndexOf('/') + 1);
    text = text.replace(/(from |new URL\()'(\.\.?\/[^']+)'/g, (_all, pre: string, rel: string) => {
      const target = new URL(rel, pathToFileURL(ROOT + base)).pathname.slice(ROOT.length);
      return `${pre}'${files.includes(target) ? pathToFileURL(local(target)).href : pathToFileURL(ROOT + target).href}'`;
    });
    writeFileSync(local(f), text);
  }
  const mod = (await import(pathToFileURL(local('activities/grade.ts')).href)) as typeof import('../../activities/grade.ts');
  return mod.gradePatch;
}

let tasks: Map<string, SweTask>;
before(async () => {
  await requireDocker();
  tasks = new Map();
  for (const m of MUTANTS) tasks.set(m.task, await sweTask(m.task));
  await imagesFor([...tasks.values()]);
});
after(async () => {
  rmSync(TMP, { recursive: true, force: true });
  await cleanup();
});

const show = (g: GradeResult) => `${g.reason} ${g.detail ?? ''} ${JSON.stringify(g.tests.FAIL_TO_PASS)}\n${g.logTail.slice(-1500)}`;

MUTANTS.forEach((m, i) => {
  test(`mutant "${m.name}": ${m.kind} scores 1 with it, 0 with the real grader${(m.holds ?? []).map((h) => `, 0 with "${h.name}"`).join('')}`, async () => {
    const task = tasks.get(m.task)!;
    const kind = ADVERSARIAL_KINDS.find((k) => k.name === m.kind)!;
    const patch = (await adversarialPatches(task, backend, [kind])).get(kind.name)!;
    const opts = m.opts ?? {};
    const [mutant, ...holds] = await Promise.all([mutantGrader(m.name, m.edits, `${i}`), ...(m.holds ?? []).map((h, j) => mutantGrader(h.name, h.edits, `${i}h${j}`))]);
    const [mg, real, ...hg] = await Promise.all([
      mutant!({ task, patch, backend, ...opts }),
      gradePatch({ task, patch, backend, ...opts }),
      ...holds.map((h, j) => h({ task, patch, backend, ...(m.holds![j]!.opts ?? opts) })),
    ]);
    assert.equal(mg.reward, 1, `the corpus does not catch mutant "${m.name}": ${show(mg)}`);
    assert.equal(real.reward, 0, show(real));
    hg.forEach((g, j) => assert.equal(g.reward, 0, `"${m.holds![j]!.name}" alone lets ${m.kind} through: ${show(g)}`));
  });
});

test('mutant "no wrapper of a file the patch changed followed": the fix whose test a package decorator wraps is runner_tampered again (the false negative v4 closed); 1 with the real grader', async () => {
  const task = tasks.get(PKG)!;
  const made = await decoratedTask(task, backend, 'calls');
  const mutant = await mutantGrader(
    'no own-call behind wrappers',
    { [PLUGIN]: [['def _own_behind(called, name):\n', 'def _own_behind(called, name):\n    return None\n']] },
    'deco',
  );
  const [mg, real] = await Promise.all([mutant({ task: made.task, patch: made.gold, backend }), gradePatch({ task: made.task, patch: made.gold, backend })]);
  assert.equal(mg.reward, 0, show(mg));
  assert.equal(mg.reason, 'runner_tampered', show(mg));
  assert.equal(real.reward, 1, show(real));
});
