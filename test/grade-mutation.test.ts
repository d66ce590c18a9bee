// test-group: docker
// Mutation check of the grader's defences: each planted bug (one defence undone, in a copy of the
// grader's sources under tmp/) must let its adversarial kind score 1, so the corpus
// (test/grade-adversarial.test.ts) would catch the bug. The real grader gives the same patch 0.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { GradeInput, GradeResult } from '../activities/grade.ts';
import { gradePatch } from '../activities/grade.ts';
import type { SweTask } from '../lib/swe/task.ts';
import { ADVERSARIAL_KINDS, adversarialPatches } from './helpers/adversarial.ts';
import { imagesFor, requireDocker, sharedTask, testBackend } from './helpers/docker.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TMP = `${ROOT}tmp/mutants-${process.pid}/`;
const { backend, cleanup } = testBackend();

interface Mutant {
  name: string;
  /** repository file → [exact text, replacement] */
  edits: Record<string, [string, string][]>;
  kind: string;
  task: string;
}

const MUTANTS: Mutant[] = [
  {
    name: 'runner files not restored',
    edits: { 'lib/swe/runner-guard.ts': [['export function isRunnerPath(path: string): boolean {', 'export function isRunnerPath(path: string): boolean {\n  if (path) return false;']] },
    kind: 'conftest-autouse-noop',
    task: 'pytoolz__toolz-1b23ada',
  },
  {
    name: 'added modules shadowing outside ones not restored',
    edits: { 'lib/swe/runner-guard.ts': [['  function shadows(p: string): boolean {', '  function shadows(p: string): boolean {\n    if (p) return false;']] },
    kind: 'shadow-stdlib',
    task: 'pytoolz__toolz-1b23ada',
  },
  {
    name: 'statuses read from the log instead of the results plugin',
    edits: { 'activities/grade.ts': [['export function runsPytest(testCmd: string): boolean {', 'export function runsPytest(testCmd: string): boolean {\n  if (testCmd) return false;']] },
    kind: 'import-fake-lines',
    task: 'pytoolz__toolz-1b23ada',
  },
  {
    name: "no check that pytest's report functions are the ones loaded before the code under test",
    edits: { 'activities/swerl_pytest_results.py': [['def _changed():\n    out = []', 'def _changed():\n    return []\n    out = []']] },
    kind: 'import-monkeypatch-reports',
    task: 'pytoolz__toolz-1b23ada',
  },
  {
    name: 'no audit of who implements the reporting hooks',
    edits: { 'lib/swe/pytest-results.ts': [['  for (const h of f.audit.hookimpls) {', '  for (const h of f.audit.hookimpls.slice(0, 0)) {']] },
    kind: 'import-register-plugin',
    task: 'pytoolz__toolz-1b23ada',
  },
  {
    name: "no cross-check of the session's exit status with the process's",
    edits: { 'lib/swe/pytest-results.ts': [['  if (exitCode !== null && exitCode !== f.exitstatus)', '  if (exitCode === -12345 && exitCode !== f.exitstatus)']] },
    kind: 'rewrite-results',
    task: 'pytoolz__toolz-1b23ada',
  },
];

/** Copies the grader's sources into TMP with `m`'s edits; returns the mutant's gradePatch. */
async function mutantGrader(m: Mutant, id: number): Promise<(i: GradeInput) => Promise<GradeResult>> {
  const dir = `${TMP}${id}/`;
  mkdirSync(dir, { recursive: true });
  const files = ['activities/grade.ts', 'activities/swerl_pytest_results.py', 'lib/swe/runner-guard.ts', 'lib/swe/pytest-results.ts'];
  const local = (f: string) => `${dir}${f.replaceAll('/', '__')}`;
  for (const f of files) {
    let text = readFileSync(ROOT + f, 'utf8');
    for (const [from, to] of m.edits[f] ?? []) {
      assert.ok(text.includes(from), `mutant ${m.name}: ${JSON.stringify(from)} not found in ${f}`);
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
  const mod = (await import(pathToFileURL(local('activities/grade.ts')).href)) as typeof import('../activities/grade.ts');
  return mod.gradePatch;
}

let tasks: Map<string, SweTask>;
before(async () => {
  await requireDocker();
  tasks = new Map();
  for (const m of MUTANTS) tasks.set(m.task, await sharedTask(m.task));
  await imagesFor([...tasks.values()]);
});
after(async () => {
  rmSync(TMP, { recursive: true, force: true });
  await cleanup();
});

MUTANTS.forEach((m, i) => {
  test(`mutant "${m.name}": ${m.kind} scores 1 with it, 0 with the real grader`, async () => {
    const task = tasks.get(m.task)!;
    const kind = ADVERSARIAL_KINDS.find((k) => k.name === m.kind)!;
    const patch = (await adversarialPatches(task, backend, [kind])).get(kind.name)!;
    const grade = await mutantGrader(m, i);
    const [mutant, real] = await Promise.all([grade({ task, patch, backend }), gradePatch({ task, patch, backend })]);
    assert.equal(mutant.reward, 1, `the corpus does not catch mutant "${m.name}": ${mutant.reason} ${mutant.detail ?? ''} ${JSON.stringify(mutant.tests)}\n${mutant.logTail.slice(-3000)}`);
    assert.equal(real.reward, 0, `${real.reason} ${real.detail ?? ''}`);
  });
});
