// No function outside the tests is over 100 lines (issue 31): a long effect is a sequence of short, named phases.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { ROOT } from '../helpers/temporal.ts';

const LIMIT = 100;

/** `file:line name (N lines)` of every function, method, arrow or constructor over `limit` lines in `text`. */
function longFunctions(file: string, text: string, limit = LIMIT): string[] {
  const src = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const out: string[] = [];
  const visit = (n: ts.Node): void => {
    if (ts.isFunctionLike(n) && 'body' in n && n.body) {
      const first = src.getLineAndCharacterOfPosition(n.getStart()).line;
      const lines = src.getLineAndCharacterOfPosition(n.getEnd()).line - first + 1;
      const p = n.parent;
      const name = n.name?.getText() ?? (ts.isVariableDeclaration(p) || ts.isPropertyAssignment(p) ? p.name.getText() : '<anonymous>');
      if (lines > limit) out.push(`${file}:${first + 1} ${name} (${lines} lines)`);
    }
    ts.forEachChild(n, visit);
  };
  visit(src);
  return out;
}

test('the check finds a long function and passes a short one', () => {
  const body = (n: number) => Array.from({ length: n }, (_, i) => `  const x${i} = ${i};`).join('\n');
  assert.deepEqual(longFunctions('a.ts', `function short() {\n${body(10)}\n}\n`), []);
  assert.deepEqual(longFunctions('a.ts', `const f = () => {\n${body(LIMIT)}\n};\n`), [`a.ts:1 f (${LIMIT + 2} lines)`]);
});

test(`no function outside test/ is over ${LIMIT} lines`, () => {
  const files = execFileSync('git', ['ls-files', '*.ts', '*.mjs'], { cwd: ROOT, encoding: 'utf8' })
    .split('\n')
    .filter((f) => f && !f.startsWith('test/'));
  const long = files.flatMap((f) => longFunctions(f, readFileSync(join(ROOT, f), 'utf8')));
  assert.deepEqual(long, []);
});
