// docs/config.md is generated from the zod schemas (scripts/config-reference.ts): it must be what the generator
// writes today, every field must say what it is, and the reference must list what the schemas accept.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { configRows, renderConfigReference, undescribedFields } from '../../scripts/config-reference.ts';
import { TrainingConfigSchema } from '../../lib/config.ts';
import { ROOT } from '../helpers/temporal.ts';

test('docs/config.md is what npm run docs:config writes from the schemas (else: run it)', () => {
  assert.equal(readFileSync(join(ROOT, 'docs', 'config.md'), 'utf8'), renderConfigReference(), 'docs/config.md is stale: run npm run docs:config');
});

test('every config field has a description', () => {
  assert.deepEqual(undescribedFields(), []);
});

test('the reference reads bounds, defaults, enums and union branches from the schema', () => {
  const rows = new Map(configRows(TrainingConfigSchema).map((r) => [r.field, r]));
  assert.deepEqual(rows.get('`batch.tasks`'), { field: '`batch.tasks`', type: 'integer ≥ 1, ≤ 512', default: '`64`', description: 'tasks per batch (DeepSWE: 64)' });
  assert.equal(rows.get('`algorithm.advantage`')!.type, '"loo" | "grpo"');
  assert.equal(rows.get('`env.tasksFile` (kind: "swe")')!.default, 'required');
  assert.match(rows.get('`learner.correction`')!.description, /"tis": truncated importance sampling/);
  // a discriminator is said on its union's row, not listed as a field of its own
  assert.ok(![...rows.keys()].some((k) => k.startsWith('`env.kind`')));
});
