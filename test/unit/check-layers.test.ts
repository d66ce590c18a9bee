// The layer checker (scripts/check-layers.ts) reads its rule from docs/design.md §11 and catches the imports that
// break it: planted in a scratch tree, an upward import and a value import of activities from a workflow are
// found; a type import of activities and a downward import are not. The repository itself breaks none.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { layerViolations, readLayers } from '../../scripts/check-layers.ts';
import { ROOT } from '../helpers/temporal.ts';

test('the §11 table of docs/design.md reads as layers, bottom first', () => {
  const layers = readLayers(readFileSync(join(ROOT, 'docs', 'design.md'), 'utf8'));
  assert.deepEqual(
    layers.map((l) => l.folders.join('+')),
    ['lib', 'gpu-learner', 'services', 'policy-server', 'activities', 'workflows', 'workers', 'scripts', 'bench+checks', 'test'],
  );
  assert.deepEqual([...layers[0]!.mayImport], []);
  assert.deepEqual([...layers[5]!.mayImport], ['lib']);
  assert.deepEqual([...layers[5]!.typesOnly], ['activities']);
  assert.ok(layers[7]!.mayImport.has('workers') && layers[7]!.mayImport.has('test/helpers') && !layers[7]!.mayImport.has('test'));
  assert.ok(layers[8]!.mayImport.has('scripts') && !layers[7]!.mayImport.has('bench'));
});

test('the repository itself: no import breaks the layer order, and no two top-level folders import each other', () => {
  const v = layerViolations(ROOT, readLayers(readFileSync(join(ROOT, 'docs', 'design.md'), 'utf8')));
  assert.deepEqual(
    v.map((x) => `${x.file}:${x.line} imports ${x.imports}`),
    [],
  );
});

test('planted imports: the upward ones are found, the allowed ones are not', () => {
  const root = mkdtempSync(join(tmpdir(), 'swerl-layers-'));
  try {
    const put = (file: string, text: string) => {
      mkdirSync(dirname(join(root, file)), { recursive: true });
      writeFileSync(join(root, file), text);
    };
    put('lib/a.ts', "import { x } from '../activities/b.ts';\n");
    put('activities/b.ts', "import { y } from '../lib/a.ts';\nimport type { S } from '../workflows/c.ts';\n");
    put('workflows/c.ts', "import type * as acts from '../activities/b.ts';\nimport { b } from '../activities/b.ts';\n");
    put('scripts/d.ts', "import { h } from '../test/helpers/e.ts';\nconst t = await import('../test/unit/f.ts');\n");
    const found = layerViolations(root, readLayers(readFileSync(join(ROOT, 'docs', 'design.md'), 'utf8')))
      .map((v) => `${v.file}:${v.line} ${v.imports}`)
      .sort();
    assert.deepEqual(found, ['activities/b.ts:2 workflows/c.ts', 'lib/a.ts:1 activities/b.ts', 'scripts/d.ts:2 test/unit/f.ts', 'workflows/c.ts:2 activities/b.ts']);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
