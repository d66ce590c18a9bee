// The condensed view of large Python files (R2E-Gym's file_editor default), on hand-made sources whose
// elisions are known line by line, and on a real module of a task (toolz 1.1.0's itertoolz.py, from PyPI).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { condensePython, type OutlineRow } from '../../lib/swe/python-outline.ts';
import { sweTask, TASK } from '../helpers/swe-tasks.ts';

const render = (rows: OutlineRow[]) => rows.map((r) => `${r.line}|${r.text}`).join('\n');

const SOURCE = `import os


def short(x):
    return x + 1


@decorator
async def long_one(a,
                   b):
    """Docstring."""
    def inner():
        return 1
    total = a + b
    return total


class Thing(Base):
    """First line.

    Middle one.
    Middle two.
    Last line.
    """

    def method(self):
        y = 0
        if self.x:
            return 1
        return 2

    def tiny(self):
        pass
`;

test("long function bodies and the middle of long class docstrings are elided; line numbers are the file's", async () => {
  const rows = await condensePython(SOURCE);
  assert.ok(rows);
  assert.equal(
    render(rows),
    [
      '1|import os',
      '2|',
      '3|',
      '4|def short(x):',
      '5|    return x + 1',
      '6|',
      '7|',
      '8|@decorator',
      '9|async def long_one(a,',
      '10|                   b):',
      // the body (docstring, nested function and all) is one notice: the nested def is not listed again
      '11|... eliding lines 11-15 ...',
      '16|',
      '17|',
      '18|class Thing(Base):',
      '19|    """First line.',
      '20|... eliding lines 20-23 ...',
      '24|    """',
      '25|',
      '26|    def method(self):',
      '27|... eliding lines 27-30 ...',
      '31|',
      '32|    def tiny(self):',
      '33|        pass',
    ].join('\n'),
  );
  assert.deepEqual(
    rows.filter((r) => r.elided).map((r) => r.elided),
    [
      [11, 15],
      [20, 23],
      [27, 30],
    ],
  );
});

test('a body of exactly 3 lines and a 4-line class docstring are kept whole; a file without a trailing newline keeps its last line', async () => {
  const src = 'class A:\n    """a\n    b\n    c"""\n\ndef f():\n    a = 1\n    b = 2\n    return a + b';
  const rows = await condensePython(src);
  assert.ok(rows);
  assert.equal(rows.length, 9);
  assert.ok(rows.every((r) => !r.elided));
  assert.equal(rows.at(-1)!.text, '    return a + b');
});

test('source that does not parse gives null (the editor then shows the file as it is)', async () => {
  assert.equal(await condensePython('def f(:\n    return 1\n'), null);
  assert.equal(await condensePython('class A\n    pass\n'), null);
});

test('a real module: toolz/itertoolz.py keeps every signature and shrinks about six-fold', async () => {
  const src = execFileSync('tar', ['-xzOf', (await sweTask(TASK.sdist)).source_tarball!, 'toolz/itertoolz.py'], { encoding: 'utf8' });
  const rows = await condensePython(src);
  assert.ok(rows);
  const lines = src.split('\n');
  const defs = lines.map((l, i) => [i + 1, l] as const).filter(([, l]) => /^(async )?def |^class /.test(l));
  assert.ok(defs.length > 30, `${defs.length} top-level definitions`);
  for (const [n, l] of defs)
    assert.ok(
      rows.some((r) => r.line === n && r.text === l),
      `line ${n} "${l}" kept`,
    );
  // every kept row is the file's own line at its own number; notices cover disjoint, increasing ranges
  let last = 0;
  for (const r of rows) {
    if (r.elided) {
      assert.ok(r.elided[0] > last && r.elided[1] >= r.elided[0]);
      last = r.elided[1];
    } else {
      assert.equal(r.text, lines[r.line - 1]);
      assert.ok(r.line > last);
      last = r.line;
    }
  }
  assert.ok(rows.length * 4 < lines.length, `${rows.length} rows of ${lines.length} lines`);
});
