// The factory's bug strategies (lib/factory/mutations.ts) and candidate list (lib/factory/candidates.ts):
// each strategy makes the edits it names inside functions only, every mutant it makes parses again, a
// candidate that does not parse is counted and never listed, and the list is capped per function and seeded.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { applyMutations, enumerateMutations, functionsOf, parsesCleanly, STRATEGIES, type Strategy } from '../../lib/factory/mutations.ts';
import { isMutable, multiCandidates, singleCandidates } from '../../lib/factory/candidates.ts';

const SRC = `"""module docstring"""
LIMIT = 10


def pick(xs, n=2, strict=True, sep=", "):
    """Docstring stays."""
    out = []
    for x in xs:
        if x > n and not strict:
            out.append(x + 1)
        elif x == n:
            continue
    total = len(out) * 3
    return out if total <= LIMIT else []


class Box:
    def put(self, a, b):
        item = merge(a, b)
        self.items.append(item)
        return item
`;

async function mutants(strategy: Strategy) {
  const ms = (await enumerateMutations('m.py', SRC, new Set([strategy])))!;
  return ms.map((m) => ({ ...m, text: applyMutations(SRC, [m]) }));
}

test('each strategy makes its edit, inside a function, and every mutant parses', async () => {
  const all = (await enumerateMutations('m.py', SRC))!;
  assert.deepEqual(new Set(all.map((m) => m.strategy)), new Set(STRATEGIES));
  for (const m of all) {
    assert.ok(m.line >= 5, `${m.strategy} at line ${m.line}: module-level code is never mutated (LIMIT = 10 stays)`);
    assert.ok(await parsesCleanly(applyMutations(SRC, [m])), `${m.strategy} ${m.what} does not parse`);
  }
  const ops = (await mutants('swap-operator')).map((m) => m.what);
  for (const w of ['`>` → `>=`', '`and` → `or`', '`==` → `!=`', '`+` → `-`', '`*` → `/`', '`<=` → `<`']) assert.ok(ops.includes(w), `swap-operator makes ${w}: ${ops.join(', ')}`);
  const off = (await mutants('off-by-one')).map((m) => m.text);
  assert.ok(off.some((t) => t.includes('out.append(x + 2)')) && off.some((t) => t.includes('len(out) * 2')));
  assert.ok(!off.some((t) => t.includes('n=3')), 'defaults belong to change-default');
  const neg = (await mutants('negate-condition')).map((m) => m.text);
  assert.ok(neg.some((t) => t.includes('if not (x > n and not strict):')) && neg.some((t) => t.includes('elif not x == n:') || t.includes('elif not (x == n):')));
  assert.ok(neg.some((t) => t.includes('return out if not (total <= LIMIT) else []')));
  const rm = await mutants('remove-statement');
  assert.ok(rm.some((m) => !m.text.includes('out.append(x + 1)')));
  assert.ok(
    rm.some((m) => m.text.includes('elif x == n:\n            pass\n')),
    'a block left empty gets pass',
  );
  assert.ok(
    rm.some((m) => !m.text.includes('elif x == n')),
    'a branch can go',
  );
  assert.ok(rm.every((m) => m.text.includes('"""Docstring stays."""')));
  const sw = (await mutants('swap-arguments')).map((m) => m.text);
  assert.deepEqual(
    sw.filter((t) => t.includes('merge(b, a)')),
    [SRC.replace('merge(a, b)', 'merge(b, a)')],
  );
  const ret = (await mutants('wrong-return')).map((m) => m.text);
  assert.ok(ret.some((t) => t.includes('return a\n')) && ret.some((t) => t.includes('return b\n')), 'put returns a parameter instead of item');
  assert.ok(!ret.some((t) => t.includes('return self')), 'self is never returned');
  const defs = (await mutants('change-default')).map((m) => m.text);
  for (const d of ['n=3', 'n=1', 'strict=False', 'sep=""'])
    assert.ok(
      defs.some((t) => t.includes(d)),
      `change-default makes ${d}`,
    );
  const fns = (await functionsOf('m.py', SRC))!;
  assert.deepEqual(
    fns.map((f) => [f.name, f.startLine, f.endLine]),
    [
      ['pick', 5, 14],
      ['Box.put', 18, 21],
    ],
  );
});

test('a file that does not parse has no mutations; overlapping edits are refused', async () => {
  assert.equal(await enumerateMutations('bad.py', 'def f(:\n  pass\n'), null);
  assert.equal(await parsesCleanly('def f(:\n  pass\n'), false);
  assert.throws(
    () =>
      applyMutations('abcdef', [
        { start: 1, end: 3, replacement: 'X' },
        { start: 2, end: 4, replacement: 'Y' },
      ]),
    /overlapping/,
  );
  assert.equal(
    applyMutations('abcdef', [
      { start: 4, end: 5, replacement: 'Y' },
      { start: 0, end: 1, replacement: 'X' },
    ]),
    'XbcdYf',
  );
});

test('candidates: package files only, capped per function, seeded, deduplicated, multi-bug combinations in different functions', async () => {
  assert.ok(isMutable('src/pkg/a.py', ['src/pkg'], []));
  assert.ok(!isMutable('src/pkg/tests/test_a.py', ['src/pkg'], []));
  assert.ok(!isMutable('pkg/conftest.py', ['pkg'], []));
  assert.ok(!isMutable('pkg/vendor/x.py', ['pkg'], ['pkg/vendor']));
  assert.ok(isMutable('single.py', ['single.py'], []));
  const files = [
    { path: 'pkg/m.py', text: SRC },
    { path: 'pkg/broken.py', text: 'def f(:\n' },
  ];
  const a = await singleCandidates('o/r', files, { strategies: new Set(STRATEGIES), seed: 1, perFunction: 3 });
  const b = await singleCandidates('o/r', files, { strategies: new Set(STRATEGIES), seed: 1, perFunction: 3 });
  const c = await singleCandidates('o/r', files, { strategies: new Set(STRATEGIES), seed: 2, perFunction: 3 });
  assert.deepEqual(a.stats.unparsable, ['pkg/broken.py']);
  assert.equal(a.stats.functions, 2);
  assert.equal(a.candidates.length, 6, 'three per function');
  assert.deepEqual(
    a.candidates.map((x) => x.dedupeKey),
    b.candidates.map((x) => x.dedupeKey),
  );
  assert.notDeepEqual(
    a.candidates.map((x) => x.dedupeKey),
    c.candidates.map((x) => x.dedupeKey),
  );
  assert.equal(new Set(a.candidates.map((x) => x.dedupeKey)).size, 6);
  // the first two candidates come from different functions (interleaved)
  assert.notEqual(a.candidates[0]!.mutations[0]!.fn.name, a.candidates[1]!.mutations[0]!.fn.name);
  for (const x of a.candidates) assert.match(x.patch, /^diff --git a\/pkg\/m\.py b\/pkg\/m\.py\n/);
  const multi = await multiCandidates('o/r', files, a.candidates, { seed: 1, max: 5 });
  assert.ok(multi.length >= 1);
  for (const m of multi) {
    assert.ok(m.mutations.length >= 2 && m.mutations.length <= 3);
    assert.equal(new Set(m.mutations.map((x) => x.fn.name)).size, m.mutations.length, 'one bug per function');
  }
});
