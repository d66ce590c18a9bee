// The factory's pure parts: patches `git apply` takes (lib/factory/patch.ts), wrong fixes for the strength
// measure (lib/factory/alternatives.ts), problem statements that never show the fix (lib/factory/problem.ts),
// fair shares and rounds (lib/factory/plan.ts), the split by repository (lib/factory/split.ts), the input's
// errors (lib/factory/config.ts) and the quality filter (lib/swe/quality.ts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { changedRegions, dedupeKey, filePatch, treePatch } from '../../lib/factory/patch.ts';
import { wrongFixes } from '../../lib/factory/alternatives.ts';
import { leakedLines, templateStatement } from '../../lib/factory/problem.ts';
import { fairShares, selection, TierPlan, type Chunk, type TierState } from '../../lib/factory/plan.ts';
import { hashInts, Rng } from '../../lib/seed.ts';
import { validationRepos } from '../../lib/factory/split.ts';
import { parseRepoSource, validateSynthInput } from '../../lib/factory/config.ts';
import { filterReason, isStrong, parseQualityLines, type TaskQuality } from '../../lib/swe/quality.ts';
import type { SweTask } from '../../lib/swe/task.ts';

function gitApplies(files: Record<string, string>, patch: string): Record<string, string> {
  const dir = mkdtempSync(join(tmpdir(), 'swerl-patch-'));
  try {
    for (const [p, t] of Object.entries(files)) writeFileSync(join(dir, p), t);
    writeFileSync(join(dir, 'p.diff'), patch);
    const r = spawnSync('git', ['apply', '--whitespace=nowarn', 'p.diff'], { cwd: dir, encoding: 'utf8' });
    assert.equal(r.status, 0, `git apply: ${r.stderr}\n${patch}`);
    return Object.fromEntries(Object.keys(files).map((p) => [p, readFileSync(join(dir, p), 'utf8')]));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('patches: git apply turns before into after (far and near hunks, a missing newline at the end)', () => {
  const lines = Array.from({ length: 40 }, (_, i) => `line ${i}`);
  const before = lines.join('\n') + '\n';
  const after = lines.map((l, i) => (i === 2 || i === 6 || i === 30 ? `${l} changed` : l)).join('\n') + '\n';
  const p = filePatch('a.txt', before, after);
  assert.equal((p.match(/^@@ /gm) ?? []).length, 2, 'changes 4 lines apart share a hunk, 24 apart do not');
  assert.deepEqual(gitApplies({ 'a.txt': before }, p), { 'a.txt': after });
  const nb = 'x\ny\nz';
  const na = 'x\nY\nz';
  assert.deepEqual(gitApplies({ 'b.txt': nb }, filePatch('b.txt', nb, na)), { 'b.txt': na });
  assert.deepEqual(gitApplies({ 'c.txt': 'a\nb\n' }, filePatch('c.txt', 'a\nb\n', 'a\nb\nc')), { 'c.txt': 'a\nb\nc' });
  assert.deepEqual(changedRegions('a\nb\nc\n', 'a\nc\n'), [{ a0: 1, a1: 2, b0: 1, b1: 1 }]);
  assert.equal(treePatch({ 'x.py': 'a\n' }, { 'x.py': 'a\n' }), '');
  // the dedupe key names the change, not where it sits
  const shifted = filePatch('a.txt', `extra\n${before}`, `extra\n${after}`);
  assert.equal(dedupeKey('o/r', p), dedupeKey('o/r', shifted));
  assert.notEqual(dedupeKey('o/r', p), dedupeKey('o/other', p));
  assert.notEqual(dedupeKey('o/r', p), dedupeKey('o/r', filePatch('a.txt', before, after.replace('line 30 changed', 'line 30 other'))));
});

const GOLD = `def area(w, h):
    if w < 0 or h < 0:
        raise ValueError("negative")
    return w * h


def perimeter(w, h):
    return 2 * (w + h)
`;

test('wrong fixes: mutations on the fixed line first, partial fixes of a two-region fix, never the base or the gold', async () => {
  const base = GOLD.replace('if w < 0 or h < 0', 'if w < 0 and h < 0');
  const one = await wrongFixes([{ path: 'g.py', base, gold: GOLD }], 4, 7);
  assert.equal(one.length, 4);
  assert.ok(one.every((w) => w.kind === 'site-mutation'));
  assert.ok(
    one.slice(0, 3).every((w) => /g\.py:2 /.test(w.what)),
    one.map((w) => w.what).join('; '),
  );
  for (const w of one) assert.ok(w.files['g.py'] !== GOLD && w.files['g.py'] !== base);
  assert.deepEqual(await wrongFixes([{ path: 'g.py', base, gold: GOLD }], 4, 7), one, 'seeded');
  const base2 = base.replace('2 * (w + h)', '2 * (w - h)');
  const two = await wrongFixes([{ path: 'g.py', base: base2, gold: GOLD }], 4, 7);
  const partial = two.filter((w) => w.kind === 'partial-fix');
  assert.equal(partial.length, 2, 'each region left out once');
  assert.ok(partial.some((w) => w.files['g.py']!.includes('w - h') && w.files['g.py']!.includes('w < 0 or h < 0')));
  assert.ok(partial.some((w) => w.files['g.py']!.includes('w + h') && w.files['g.py']!.includes('w < 0 and h < 0')));
  assert.deepEqual(await wrongFixes([{ path: 'g.py', base, gold: GOLD }], 0, 7), []);
});

test('problem statements show the failing tests and their messages, never a line of the fix', () => {
  const patch = filePatch('pkg/geo.py', GOLD.replace('w * h', 'w + h'), GOLD);
  const s = templateStatement({
    failing: ['tests/test_geo.py::test_area', 'tests/test_geo.py::test_square'],
    failures: {
      'tests/test_geo.py::test_area': {
        crash: 'assert 5 == 6\n +  where 5 = area(2, 3)',
        entries: [
          { path: 'tests/test_geo.py', line: 4, lines: ['    def test_area():', '>       assert area(2, 3) == 6', 'E       assert 5 == 6'] },
          { path: 'pkg/geo.py', line: 4, lines: ['    def area(w, h):', '>       return w + h'] },
        ],
      },
    },
    testFiles: new Set(['tests/test_geo.py']),
    patch,
    seed: 3,
  });
  assert.match(s, /tests\/test_geo\.py::test_area/);
  assert.match(s, /tests\/test_geo\.py::test_square/);
  assert.match(s, /assert 5 == 6/);
  assert.match(s, /assert area\(2, 3\) == 6/);
  assert.doesNotMatch(s, /pkg\/geo\.py/, 'frames outside the test files are left out');
  assert.deepEqual(leakedLines(s, patch), []);
  assert.deepEqual(leakedLines('x\n    return w + h\n', patch), ['    return w + h'], 'the check finds a leaked line');
  // a test whose own source holds the buggy line loses that line
  const s2 = templateStatement({
    failing: ['tests/t.py::t'],
    failures: { 'tests/t.py::t': { crash: 'boom', entries: [{ path: 'tests/t.py', line: 1, lines: ['    x = w + h  # as the code does', '>   assert f() == x'] }] } },
    testFiles: new Set(['tests/t.py']),
    patch: filePatch('p.py', 'x = w + h\n', 'x = w * h\n'),
    seed: 0,
  });
  assert.doesNotMatch(s2, /w \+ h|w \* h/);
  assert.match(s2, /assert f\(\) == x/);
});

test('fair shares; lanes take the next chunk of the repository furthest below its share; the tasks kept do not depend on timing', () => {
  assert.deepEqual(fairShares(10, [Infinity, Infinity, Infinity]), [4, 3, 3]);
  assert.deepEqual(fairShares(10, [1, Infinity, 2]), [1, 7, 2]);
  assert.deepEqual(fairShares(10, [1, 2, 3]), [1, 2, 3]);
  const states = (): TierState[] => [
    { total: 100, next: 0, valid: [] },
    { total: 3, next: 0, valid: [] },
  ];
  const s = states();
  const plan = new TierPlan(s, 8);
  const a = plan.nextChunk()!;
  assert.deepEqual(a, { repo: 0, from: 0, to: 8 }, 'share 4 at the prior yield of 1/2: 8 candidates');
  assert.deepEqual(plan.nextChunk(), { repo: 1, from: 0, to: 3 }, 'then the other repository, as far as its candidates go');
  assert.equal(plan.nextChunk(), null, 'what is in flight is expected to cover both shares');
  plan.complete({ repo: 1, from: 0, to: 3 }, [1]);
  assert.deepEqual(plan.shares(), [7, 1], 'a repository that ran out leaves the rest of its share to the others');
  assert.deepEqual(plan.nextChunk(), { repo: 0, from: 8, to: 14 }, 'what it lacks (7 − 8 in flight × 1/2), at its yield');
  assert.equal(plan.idle(), false);
  // a simulation: verdicts fixed per candidate, chunks completed in random orders by 1 to 4 lanes
  const verdict = (repo: number, i: number) => hashInts(repo, i, 9) % 5 < [1, 2, 4][repo]!;
  const run = (lanes: number, seed: number) => {
    const st: TierState[] = [
      { total: 60, next: 0, valid: [] },
      { total: 12, next: 0, valid: [] },
      { total: 40, next: 0, valid: [] },
    ];
    const p = new TierPlan(st, 20);
    const rng = new Rng(seed);
    const flying: Chunk[] = [];
    for (let judged = 0; ; judged++) {
      while (flying.length < lanes) {
        const ch = p.nextChunk();
        if (!ch) break;
        flying.push(ch);
      }
      if (flying.length === 0) break;
      const [ch] = flying.splice(rng.nextU32() % flying.length, 1);
      const valid: number[] = [];
      for (let i = ch!.from; i < ch!.to; i++) if (verdict(ch!.repo, i)) valid.push(i);
      p.complete(ch!, valid);
    }
    return selection(st, 20);
  };
  const want = run(1, 0);
  assert.equal(want.flat().length, 20);
  for (let k = 0; k < 40; k++) assert.deepEqual(run(1 + (k % 4), k), want, `lanes ${1 + (k % 4)}, order ${k}`);
  const names = ['a/one', 'b/two', 'c/three', 'd/four', 'e/five', 'f/six', 'g/seven', 'h/eight'];
  const v = validationRepos(names, { fraction: 0.25 });
  assert.equal(v.length, 2);
  assert.deepEqual(validationRepos([...names].reverse(), { fraction: 0.25 }), v, 'order of the list does not matter');
  assert.deepEqual(validationRepos(names, { fraction: 0.25, repos: ['b/two'] }), ['b/two']);
  assert.throws(() => validationRepos(names, { fraction: 0.25, repos: ['z/none'] }), /"z\/none" not among/);
  assert.deepEqual(validationRepos(['only/one'], { fraction: 0.5 }), []);
});

test('bad input is named with its value', () => {
  assert.deepEqual(parseRepoSource('pypi:tomli==2.0.1'), { kind: 'pypi', name: 'tomli', version: '2.0.1' });
  assert.deepEqual(parseRepoSource('/x/r.tar.gz'), { kind: 'tarball', path: '/x/r.tar.gz' });
  assert.throws(() => parseRepoSource('pypi:tomli'), /pypi:NAME==VERSION/);
  assert.throws(() => parseRepoSource('rel/dir'), /absolute path/);
  const bad = validateSynthInput({ repos: [{ source: 'pypi:x>=1', testCmd: '' }], outDir: 'rel', max: 0, strategies: ['nope'], concurrency: 100 });
  assert.equal(bad.ok, false);
  const errs = (bad as { errors: string[] }).errors.join('\n');
  for (const want of [
    'synth.repos.0.source',
    'synth.repos.0.testCmd',
    'synth.outDir: must be an absolute path, got "rel"',
    'synth.max: must be ≥ 1, got 0',
    'synth.strategies.0',
    'synth.concurrency: must be ≤ 64, got 100',
  ])
    assert.ok(errs.includes(want), `${want} in:\n${errs}`);
  const ok = validateSynthInput({ repos: [{ source: '/r', testCmd: 'pytest' }], outDir: '/o' });
  assert.ok(ok.ok && ok.input.max === 100 && ok.input.strategies.length === 7 && ok.input.validation.fraction === 0.25);
});

test('quality: strong tasks, filters, sidecar files', () => {
  const q = (score: number | null, f2p = 1, passed = 2): TaskQuality => ({
    version: 'swerl-quality/1',
    gold: { runs: 2, passed },
    strength: { tried: score === null ? 0 : 5, rejected: score === null ? 0 : Math.round(score * 5), score, accepted: [] },
    failToPass: f2p,
    passToPass: 10,
    testSeconds: 1,
    dedupeKey: 'k',
  });
  const task = (quality?: TaskQuality, split?: string) => ({ instance_id: 'i', quality, split }) as unknown as SweTask;
  assert.ok(isStrong(q(0.8)) && !isStrong(q(0.6)) && !isStrong(q(null)) && !isStrong(undefined));
  assert.equal(filterReason(task(q(1)), { minStrength: 0.8 }), undefined);
  assert.match(filterReason(task(q(0.4)), { minStrength: 0.8 })!, /strength 0.4 below 0.8/);
  assert.match(filterReason(task(), { minStrength: 0.8 })!, /no quality metadata/);
  assert.match(filterReason(task(q(1, 9)), { maxFailToPass: 5 })!, /9 FAIL_TO_PASS/);
  assert.match(filterReason(task(q(1, 1, 1)), { goldAlwaysPasses: true })!, /gold passed 1 of 2/);
  assert.match(filterReason(task(q(1), 'validation'), { split: 'train' })!, /not in split train/);
  assert.equal(filterReason(task(undefined, 'train'), { split: 'train' }), undefined, 'the split needs no quality');
  const side = parseQualityLines(`${JSON.stringify({ instance_id: 'a', quality: q(1) })}\n\n`, 'q.jsonl');
  assert.equal(side.get('a')?.strength.score, 1);
  assert.throws(() => parseQualityLines('{"instance_id": "a"}\n', 'q.jsonl'), /q\.jsonl line 1: field quality/);
});

test('training draws only the tasks env.taskFilter keeps; evaluation reports pass@1 on strong tasks beside all', async () => {
  const { taskIdsFor } = await import('../../activities/dataset.ts');
  const { validateConfig } = await import('../../lib/config.ts');
  const { evaluationMetrics, formatEvalMetrics } = await import('../../lib/eval/metrics.ts');
  const dir = mkdtempSync(join(tmpdir(), 'swerl-filter-'));
  try {
    const q = (score: number | null) => ({
      version: 'swerl-quality/1',
      gold: { runs: 2, passed: 2 },
      strength: { tried: 5, rejected: 5, score, accepted: [] },
      failToPass: 1,
      passToPass: 3,
      testSeconds: 1,
      dedupeKey: 'k',
    });
    const rec = (id: string, extra: Record<string, unknown>) =>
      JSON.stringify({
        instance_id: id,
        repo: 'o/r',
        base_commit: 'c',
        problem_statement: 'p',
        patch: '',
        test_patch: '',
        FAIL_TO_PASS: ['t'],
        PASS_TO_PASS: [],
        test_cmd: 'pytest',
        image: 'img',
        ...extra,
      });
    const file = join(dir, 'tasks.jsonl');
    writeFileSync(
      file,
      [rec('strong', { quality: q(1), split: 'train' }), rec('weak', { quality: q(0.4), split: 'train' }), rec('bare', { split: 'validation' })].join('\n') + '\n',
    );
    const config = (taskFilter?: unknown) => {
      const v = validateConfig({ batch: { tasks: 4, samples: 1 }, env: { kind: 'swe', tasksFile: file, ...(taskFilter ? { taskFilter } : {}) } });
      assert.ok(v.ok, JSON.stringify(v));
      return v.config;
    };
    assert.deepEqual(new Set(await taskIdsFor(config(), 0)), new Set(['strong', 'weak', 'bare']));
    assert.deepEqual(new Set(await taskIdsFor(config({ minStrength: 0.8 }), 0)), new Set(['strong']));
    assert.deepEqual(new Set(await taskIdsFor(config({ split: 'train' }), 0)), new Set(['strong', 'weak']));
    const side = join(dir, 'q.jsonl');
    writeFileSync(side, JSON.stringify({ instance_id: 'bare', quality: q(0.9) }) + '\n');
    assert.deepEqual(new Set(await taskIdsFor(config({ minStrength: 0.8, qualityFile: side }), 0)), new Set(['strong', 'bare']), 'the sidecar gives bare a strength');
    await assert.rejects(
      taskIdsFor(config({ minStrength: 0.95, maxFailToPass: 1, split: 'validation' }), 0),
      /config\.env\.taskFilter: none of the 3 tasks .* passes .*\(2 not in split validation, 1 no quality metadata\)/,
    );
    assert.equal(validateConfig({ env: { kind: 'swe', tasksFile: file, taskFilter: { minStrength: 2 } } }).ok, false);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const plan = { taskIds: ['a', 'b', 'c', 'd'], repos: { a: 'x', b: 'x', c: 'x', d: 'x' }, runs: 2 };
  const ep = (taskId: string, run: number, resolved: boolean) => ({ taskId, run, resolved, end: 'submitted', steps: 1, tokens: 1, responseTokens: 1, seconds: 1 });
  const eps = [ep('a', 0, true), ep('a', 1, true), ep('b', 0, true), ep('b', 1, false), ep('c', 0, false), ep('c', 1, false), ep('d', 0, false), ep('d', 1, false)];
  const m = evaluationMetrics(plan, eps, [], { strong: { ids: new Set(['a', 'b']), minStrength: 0.8 } });
  assert.equal(m.pass1, (1 + 0.5) / 4);
  assert.deepEqual(m.strong, { minStrength: 0.8, tasks: 2, pass1: 0.75 });
  assert.match(formatEvalMetrics(m), /pass@1 all tasks 37\.5% \(4\) \| strong tasks 75\.0% \(2, test strength ≥ 0\.8\)/);
  assert.equal(evaluationMetrics(plan, eps, []).strong, undefined);
});
