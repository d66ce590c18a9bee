// docs/config.md, the config reference, generated from the zod schemas themselves (zod's JSON Schema export:
// types, bounds, defaults and each field's `.describe()`), so it cannot drift from what the code accepts.
//   npm run docs:config            writes docs/config.md
//   npm run docs:config -- --check exits 1 when docs/config.md is stale (test/unit/config-reference.test.ts does the same)
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { HyperparametersSchema, TrainingConfigSchema } from '../lib/config.ts';
import { BestOfKConfigSchema, EvalConfigSchema } from '../lib/eval/config.ts';

/** The part of JSON Schema that zod's export produces for our schemas. */
interface Node {
  type?: string;
  description?: string;
  default?: unknown;
  enum?: unknown[];
  const?: unknown;
  pattern?: string;
  format?: string;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  minLength?: number;
  minItems?: number;
  items?: Node;
  properties?: Record<string, Node>;
  required?: string[];
  anyOf?: Node[];
  oneOf?: Node[];
  /** zod's never (a renamed field, lib/config.ts's renamedTo) */
  not?: unknown;
}

interface Row {
  field: string;
  type: string;
  default: string;
  description: string;
}

const MAX_SAFE = Number.MAX_SAFE_INTEGER;

function bounds(n: Node): string {
  const lo = n.exclusiveMinimum !== undefined ? `> ${n.exclusiveMinimum}` : n.minimum !== undefined && n.minimum > -MAX_SAFE ? `≥ ${n.minimum}` : '';
  const hi = n.exclusiveMaximum !== undefined ? `< ${n.exclusiveMaximum}` : n.maximum !== undefined && n.maximum < MAX_SAFE ? `≤ ${n.maximum}` : '';
  return [lo, hi].filter(Boolean).join(', ');
}

/** A field's type and constraints in words: `integer ≥ 1, ≤ 512`, `"loo" | "grpo"`, `string matching ^file://`. */
function typeOf(n: Node): string {
  if (n.not !== undefined) return 'not accepted';
  const alternatives = n.anyOf ?? n.oneOf;
  if (alternatives && !alternatives.some((a) => a.properties)) return alternatives.map(typeOf).join(' or ');
  if (n.const !== undefined) return JSON.stringify(n.const);
  if (n.enum) return n.enum.map((v) => JSON.stringify(v)).join(' | ');
  switch (n.type) {
    case 'integer':
    case 'number':
      return [n.type, bounds(n)].filter(Boolean).join(' ');
    case 'string':
      if (n.format === 'uri') return 'URL';
      return n.pattern ? `string matching \`${n.pattern}\`` : 'string';
    case 'array':
      return `array of ${n.items ? typeOf(n.items) : 'values'}${n.minItems ? ` (at least ${n.minItems})` : ''}`;
    case 'object':
      return 'object';
    default:
      return n.type ?? 'any';
  }
}

function defaultOf(n: Node, required: boolean): string {
  if (n.default === undefined) return required ? 'required' : '';
  if (typeof n.default === 'object' && n.default !== null && Object.keys(n.default).length === 0) return '';
  return `\`${JSON.stringify(n.default)}\``;
}

/** A union branch's discriminator field (a constant: `kind`, `mode`), if it has one. */
function discriminator(b: Node): [string, Node] | undefined {
  return Object.entries(b.properties ?? {}).find(([, v]) => v.const !== undefined);
}

/** How a branch of a union is told apart: its discriminator (`kind: "swe"`) or its required fields (`{path}`). */
function branchLabel(b: Node): string {
  const d = discriminator(b);
  return d ? `${d[0]}: ${JSON.stringify(d[1].const)}` : `{${(b.required ?? Object.keys(b.properties ?? {})).join(', ')}}`;
}

/** A union's description, then what each discriminated branch means (`"tis": truncated importance sampling`). */
function unionDescription(n: Node, branches: Node[]): string {
  const meanings = branches.flatMap((b) => {
    const d = discriminator(b);
    return d?.[1].description ? [`${JSON.stringify(d[1].const)}: ${d[1].description}`] : [];
  });
  return [n.description, ...meanings].filter(Boolean).join('; ');
}

const cell = (s: string) => s.replace(/\|/g, '\\|').replace(/\n/g, ' ');

/** The rows of `n` at `path` (dotted), depth first; union branches label their fields. */
function rows(n: Node, path: string, required: boolean, label: string, out: Row[]): void {
  const alternatives = (n.anyOf ?? n.oneOf)?.filter((a) => a.properties);
  const field = `\`${path}\`${label ? ` (${label})` : ''}`;
  if (alternatives?.length) {
    const type = `one of ${alternatives.map((a) => `\`${branchLabel(a)}\``).join(', ')}`;
    out.push({ field, type, default: defaultOf(n, required), description: unionDescription(n, alternatives) });
    for (const b of alternatives) objectRows(b, path, [label, branchLabel(b)].filter(Boolean).join('; '), out);
    return;
  }
  if (n.properties) {
    if (n.description) out.push({ field, type: 'object', default: defaultOf(n, required), description: n.description });
    objectRows(n, path, label, out);
    return;
  }
  out.push({ field, type: typeOf(n), default: defaultOf(n, required), description: n.description ?? '' });
}

function objectRows(n: Node, path: string, label: string, out: Row[]): void {
  for (const [k, child] of Object.entries(n.properties ?? {})) {
    // a discriminator is the branch's label, and its meaning is said on the union's row
    if (child.const !== undefined && label.endsWith(`${k}: ${JSON.stringify(child.const)}`)) continue;
    rows(child, path ? `${path}.${k}` : k, (n.required ?? []).includes(k), label, out);
  }
}

/** Every field of `schema` as table rows. */
export function configRows(schema: z.ZodType): Row[] {
  const json = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as Node;
  const out: Row[] = [];
  objectRows(json, '', '', out);
  return out;
}

function table(rs: Row[]): string {
  const lines = ['| field | type | default | what it is |', '| --- | --- | --- | --- |'];
  for (const r of rs) lines.push(`| ${cell(r.field)} | ${cell(r.type)} | ${cell(r.default)} | ${cell(r.description)} |`);
  return lines.join('\n');
}

export const CONFIGS: { title: string; schema: z.ZodType; intro: string }[] = [
  {
    title: 'Training config',
    schema: TrainingConfigSchema,
    intro:
      "`swerl train --config FILE`, the input of the `trainingRun` workflow (lib/config.ts). Defaults are DeepSWE's published settings; `configs/frozenlake.json` is the demo's preset. A bad value is refused naming its path and value, e.g. `config.batch.tasks: must be ≤ 512, got 1000`.",
  },
  {
    title: 'Evaluation config',
    schema: EvalConfigSchema,
    intro: '`swerl eval --config FILE`, the input of the `evaluationRun` workflow (lib/eval/config.ts; docs/evaluation.md).',
  },
  {
    title: 'Best@K config',
    schema: BestOfKConfigSchema,
    intro: '`swerl eval best-of-k --config FILE`, the input of the `selectBestOfK` workflow over a finished evaluation (lib/eval/config.ts).',
  },
];

/** The whole of docs/config.md. */
export function renderConfigReference(): string {
  const parts = [
    '# Config reference',
    '',
    'Generated by `npm run docs:config` from the zod schemas (scripts/config-reference.ts): edit the schemas and their `.describe()` texts, not this file. `test/unit/config-reference.test.ts` fails when it is stale. A field of a union names its branch in brackets, e.g. `env.size` (kind: "frozenlake"); an empty default means the field may be left out.',
  ];
  for (const c of CONFIGS) parts.push('', `## ${c.title}`, '', c.intro, '', table(configRows(c.schema)));
  parts.push(
    '',
    '### Changing a running training run',
    '',
    `The \`updateHyperparameters\` update takes any of ${Object.keys(HyperparametersSchema.shape)
      .map((k) => `\`${k}\``)
      .join(', ')} (the fields of the same names above), validated as there; they apply from the next iteration.`,
  );
  return parts.join('\n') + '\n';
}

/** Fields with no description: the reference would leave them unexplained. */
export function undescribedFields(): string[] {
  return CONFIGS.flatMap((c) =>
    configRows(c.schema)
      .filter((r) => !r.description)
      .map((r) => `${c.title}: ${r.field}`),
  );
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const file = fileURLToPath(new URL('../docs/config.md', import.meta.url));
  const text = renderConfigReference();
  const missing = undescribedFields();
  if (missing.length) console.error(`fields without a .describe(): ${missing.join('; ')}`);
  if (process.argv.includes('--check')) {
    const stale = readFileSync(file, 'utf8') !== text;
    if (stale) console.error('docs/config.md is stale: run npm run docs:config');
    process.exitCode = stale || missing.length ? 1 : 0;
  } else {
    writeFileSync(file, text);
    console.log(`wrote ${file}`);
  }
}
