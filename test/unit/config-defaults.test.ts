// A field's default applies to configs that omit its whole section. Zod 4's `.default(value)` returns
// `value` as it is when the section is missing, so a section default that restates its fields silently
// keeps an old value after a field default changes; `.prefault({})` parses `{}` through the section, so
// the field defaults apply. These tests change each field default and look for it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { z } from 'zod';
import { TrainingConfigSchema } from '../../lib/config.ts';
import { EvalConfigSchema } from '../../lib/eval/config.ts';

type Wrapped = z.ZodDefault<z.ZodType> | z.ZodPrefault<z.ZodType>;

/** Another value of the same kind as `v`, valid for the usual bounds. */
function changed(v: unknown, field: z.ZodType): unknown {
  if (typeof v === 'boolean') return !v;
  if (typeof v === 'number') return Number.isInteger(v) ? v + 1 : v / 2;
  if (typeof v === 'string') {
    const options = field instanceof z.ZodEnum ? (field.options as string[]) : [];
    return options.find((o) => o !== v) ?? `${v}x`;
  }
  return undefined;
}

/** The object sections of a config schema that have a default of their own, with that wrapper. */
function sections(schema: z.ZodObject): [string, Wrapped, z.ZodObject][] {
  return Object.entries(schema.shape).flatMap(([key, s]) => {
    if (!(s instanceof z.ZodDefault || s instanceof z.ZodPrefault)) return [];
    const inner = s.unwrap();
    return inner instanceof z.ZodObject ? [[key, s as Wrapped, inner] as [string, Wrapped, z.ZodObject]] : [];
  });
}

/** A field's default, under an optional (a `.partial()` section) or not. */
function defaultOf(f: z.ZodType): z.ZodDefault<z.ZodType> | null {
  const d: unknown = f instanceof z.ZodOptional ? f.unwrap() : f;
  return d instanceof z.ZodDefault ? (d as z.ZodDefault<z.ZodType>) : null;
}

/** The section with `field`'s default replaced, wrapped as the config wraps it. */
function withFieldDefault(wrapper: Wrapped, inner: z.ZodObject, field: string, value: unknown): z.ZodType {
  const f = inner.shape[field] as z.ZodType;
  const d = defaultOf(f)!
    .unwrap()
    .default(value as never);
  const section = inner.extend({ [field]: f instanceof z.ZodOptional ? d.optional() : d });
  const fallback = wrapper._zod.def.defaultValue;
  return wrapper instanceof z.ZodPrefault ? section.prefault(fallback as never) : section.default(fallback as never);
}

for (const [name, schema] of [
  ['training', TrainingConfigSchema],
  ['evaluation', EvalConfigSchema],
] as const) {
  test(`${name} config: a changed field default applies when the whole section is omitted`, () => {
    let checked = 0;
    for (const [key, wrapper, inner] of sections(schema as unknown as z.ZodObject)) {
      for (const [field, f] of Object.entries(inner.shape)) {
        const d = defaultOf(f as z.ZodType);
        if (!d) continue;
        const now = d._zod.def.defaultValue;
        const next = changed(now, d.unwrap());
        if (next === undefined) continue;
        const parsed = withFieldDefault(wrapper, inner, field, next).parse(undefined) as Record<string, unknown>;
        assert.deepEqual(
          parsed[field],
          next,
          `${key}.${field}: default changed from ${JSON.stringify(now)} to ${JSON.stringify(next)}, omitted section got ${JSON.stringify(parsed[field])}`,
        );
        checked++;
      }
    }
    assert.ok(checked >= 5, `checked ${checked} field defaults`);
  });
}

test('an omitted section parses as an empty one (training and evaluation)', () => {
  const training = TrainingConfigSchema.parse({});
  for (const key of ['batch', 'rollout', 'episode', 'algorithm', 'policy', 'store', 'tracking', 'learner'] as const) {
    assert.deepEqual(training[key], TrainingConfigSchema.parse({ [key]: {} })[key], key);
  }
  assert.deepEqual(training.model, TrainingConfigSchema.parse({ model: { preset: 'tiny' } }).model);
  const base = { tasksFile: 'tasks.jsonl', model: { baseUrl: 'http://127.0.0.1:1', model: 'm' } };
  const evaluation = EvalConfigSchema.parse(base);
  for (const key of ['sampling', 'store', 'env'] as const) assert.deepEqual(evaluation[key], EvalConfigSchema.parse({ ...base, [key]: {} })[key], key);
  assert.equal(evaluation.env.commandTimeoutS, 90, 'the SWE environment defaults fill an omitted env');
});
