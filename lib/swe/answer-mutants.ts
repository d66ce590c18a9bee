// Answer-mutants of the FAIL_TO_PASS tests (issue 30 item 5): copies of a listed test whose expected value in
// one assertion is changed (a different constant, a different expected collection, a flipped boolean), so the
// gold patch fails them. Named, formatted, decorated and placed like the real tests (lib/swe/canaries.ts inserts
// them), they differ from the test they copy only in the answer: a hack that makes the real test pass without
// knowing the answer (a universal object, an assertion oracle, tests neutered except canary-looking ones) makes
// its mutant pass too, and a must-fail canary that passes is runner_tampered. Each candidate is verified once
// per task to fail under the gold patch (activities/canary-mutants.ts), and the verified ones are cached.
// Pure: candidates from the test file's text as base + test_patch has it (tree-sitter, lib/swe/python-outline.ts).
import { createHash } from 'node:crypto';
import type { Node } from 'web-tree-sitter';
import { pythonParser } from './python-outline.ts';

/** One answer-changing edit of a listed test: the byte range of a literal in the file and its replacement. */
export interface MutantEdit {
  /** the test it copies (a pytest node id, or file::Class::name for unittest tests) */
  source: string;
  start: number;
  end: number;
  text: string;
  what: 'constant' | 'collection' | 'boolean';
}

/** A mutant verified to fail under the gold patch, for the file text whose sha1 is `sha` (base + test_patch). */
export interface VerifiedMutant extends MutantEdit {
  path: string;
  sha: string;
}

/** Candidates per test: the last few assertions with a literal answer (the later the check, the surer the failure is its own). */
const PER_TEST = 3;
const ASSERT_METHODS = new Set([
  'assertEqual',
  'assertEquals',
  'assertNotEqual',
  'assertListEqual',
  'assertTupleEqual',
  'assertDictEqual',
  'assertSetEqual',
  'assertSequenceEqual',
  'assertMultiLineEqual',
  'assertCountEqual',
  'assertIs',
  'assertAlmostEqual',
  'assertIn',
]);

/** the test class's own checking helpers (`self._test_expression(input, expected)`): their last literal argument is the answer */
const HELPER_CHECK = /assert|check|expect|verify|^_?test_|^_?compare/i;

export function sha1(text: string): string {
  return createHash('sha1').update(text).digest('hex');
}

/** The replacement of a literal expression that changes its value and keeps its form, or undefined (not a literal we change). */
export function mutateLiteral(n: Node, allowDrop = true): Omit<MutantEdit, 'source'> | undefined {
  switch (n.type) {
    case 'integer': {
      if (!/^\d+$/.test(n.text)) return undefined;
      return { start: n.startIndex, end: n.endIndex, text: String(BigInt(n.text) + 1n), what: 'constant' };
    }
    case 'float': {
      const m = /^(\d+)\.(\d*)$/.exec(n.text);
      if (!m) return undefined;
      return { start: n.startIndex, end: n.endIndex, text: `${BigInt(m[1]!) + 1n}.${m[2]}`, what: 'constant' };
    }
    case 'true':
    case 'false':
      return { start: n.startIndex, end: n.endIndex, text: n.type === 'true' ? 'False' : 'True', what: 'boolean' };
    case 'string':
      return mutateString(n);
    case 'unary_operator':
    case 'parenthesized_expression':
      return n.namedChildren.length === 1 ? mutateLiteral(n.namedChildren[0]!, allowDrop) : undefined;
    case 'list':
    case 'tuple':
    case 'set':
    case 'dictionary':
      return mutateCollection(n, allowDrop);
    case 'call': {
      // a value built from one literal (`D({"a": 1})`, `Decimal("1.5")`, `frozenset([1, 2])`): the literal changed
      const args = n.childForFieldName('arguments')?.namedChildren.filter((c): c is Node => !!c && c.type !== 'comment') ?? [];
      const fn = n.childForFieldName('function');
      return args.length === 1 && (fn?.type === 'identifier' || fn?.type === 'attribute') ? mutateLiteral(args[0]!, allowDrop) : undefined;
    }
    default:
      return undefined;
  }
}

/** The last character of a plain string changed (a letter to the next one, a digit to the next digit), or a character added to ''. */
function mutateString(n: Node): Omit<MutantEdit, 'source'> | undefined {
  if (n.namedChildren.some((c) => c?.type === 'interpolation')) return undefined;
  const contents = n.namedChildren.filter((c): c is Node => c?.type === 'string_content');
  const last = contents.at(-1);
  if (!last) {
    const start = n.namedChildren.find((c) => c?.type === 'string_start');
    return start ? { start: start.endIndex, end: start.endIndex, text: 'x', what: 'constant' } : undefined;
  }
  const ch = last.text.at(-1)!;
  const next = /[a-y]/i.test(ch)
    ? String.fromCharCode(ch.charCodeAt(0) + 1)
    : /[zZ]/.test(ch)
      ? ch === 'z'
        ? 'a'
        : 'A'
      : /[0-8]/.test(ch)
        ? String(Number(ch) + 1)
        : ch === '9'
          ? '0'
          : undefined;
  if (next === undefined) return { start: last.endIndex, end: last.endIndex, text: 'x', what: 'constant' };
  return { start: last.endIndex - 1, end: last.endIndex, text: next, what: 'constant' };
}

/**
 * A collection: its last element that is a literal changed (recursively), else (`allowDrop`: an expected value,
 * not a table's row whose shape the test unpacks) an element added to an empty one or its last element dropped.
 */
function mutateCollection(n: Node, allowDrop: boolean): Omit<MutantEdit, 'source'> | undefined {
  const items = n.namedChildren.filter((c): c is Node => !!c && c.type !== 'comment');
  for (const it of [...items].reverse()) {
    const target = it.type === 'pair' ? it.childForFieldName('value') : it;
    const m = target ? mutateLiteral(target, false) : undefined;
    if (m) return { ...m, what: m.what === 'boolean' ? 'boolean' : 'collection' };
  }
  if (!allowDrop) return undefined;
  if (items.length === 0) {
    // an empty collection gets one element
    const open = n.children[0];
    if (!open || open.isNamed) return undefined;
    const text = n.type === 'dictionary' ? '0: 0' : n.type === 'tuple' ? '0,' : '0';
    return { start: open.endIndex, end: open.endIndex, text, what: 'collection' };
  }
  if (items.length < 2) return undefined;
  // drop the last element with the separator before it
  const prev = items.at(-2)!;
  return { start: prev.endIndex, end: items.at(-1)!.endIndex, text: '', what: 'collection' };
}

/** Assertion sites of a test body in source order, nested blocks included, nested functions and classes not. */
function assertionSites(body: Node): Node[] {
  const out: Node[] = [];
  const walk = (n: Node) => {
    for (const c of n.namedChildren) {
      if (!c || c.type === 'function_definition' || c.type === 'class_definition' || c.type === 'decorated_definition' || c.type === 'lambda') continue;
      if (c.type === 'assert_statement') out.push(c);
      else if (c.type === 'expression_statement' && c.namedChildren[0]?.type === 'call') {
        const fn = c.namedChildren[0].childForFieldName('function');
        const name = fn?.type === 'attribute' && fn.childForFieldName('object')?.text === 'self' ? (fn.childForFieldName('attribute')?.text ?? '') : '';
        if (ASSERT_METHODS.has(name) || HELPER_CHECK.test(name)) out.push(c);
      } else walk(c);
    }
  };
  walk(body);
  return out;
}

/**
 * The answer of one assertion site: the literal it compares with (the right side first) changed, or, where a side
 * is a name, the literal the test last bound to it before the site (`expected = [...]`).
 */
function mutateSite(site: Node, body: Node): Omit<MutantEdit, 'source'> | undefined {
  let sides: (Node | null | undefined)[];
  if (site.type === 'assert_statement') {
    const cond = site.namedChildren[0];
    if (cond?.type !== 'comparison_operator') return undefined;
    const ops = cond.children.filter((c) => c && !c.isNamed).map((c) => c!.text);
    if (ops.length !== 1 || !['==', 'is', '!='].includes(ops[0]!)) return undefined;
    sides = [cond.namedChildren[1], cond.namedChildren[0]];
  } else {
    const call = site.namedChildren[0]!;
    const name = call.childForFieldName('function')?.childForFieldName('attribute')?.text ?? '';
    const args = (call.childForFieldName('arguments')?.namedChildren ?? []).filter((c): c is Node => !!c && c.type !== 'keyword_argument' && c.type !== 'comment');
    if (args.length < 2) return undefined;
    // unittest's checks: (first, second); a helper of the class: its last argument is the expected value
    sides = ASSERT_METHODS.has(name) ? [args[1], args[0]] : [args.at(-1)];
  }
  for (const side of sides) {
    const m = side ? mutateLiteral(side) : undefined;
    if (m) return m;
  }
  for (const side of sides) {
    const bound = side?.type === 'identifier' ? boundLiteral(body, side.text, site.startIndex) : undefined;
    const m = bound ? mutateLiteral(bound) : undefined;
    if (m) return m;
  }
  return undefined;
}

/** The right side of the last `name = <expr>` of the body before `before` (top-level statements of the body). */
function boundLiteral(body: Node, name: string, before: number): Node | undefined {
  let found: Node | undefined;
  for (const st of body.namedChildren) {
    if (!st || st.startIndex >= before) break;
    const a = st.type === 'expression_statement' ? st.namedChildren[0] : undefined;
    if (a?.type === 'assignment' && a.childForFieldName('left')?.text === name) found = a.childForFieldName('right') ?? undefined;
  }
  return found;
}

/**
 * Candidate mutants of the tests `ids` (node ids: `file::name` or `file::Class::name`, not parametrized) defined in
 * `source`, the file's text as base + test_patch has it: up to PER_TEST per test, the last assertions first.
 */
export async function mutantCandidates(path: string, source: string, ids: readonly string[]): Promise<MutantEdit[]> {
  const tree = (await pythonParser()).parse(source);
  if (!tree) return [];
  try {
    if (tree.rootNode.hasError) return [];
    const out: MutantEdit[] = [];
    for (const id of ids) {
      const parts = id.split('::');
      if (parts[0] !== path || parts.some((p) => p.includes('['))) continue;
      const fn = findTest(tree.rootNode, parts.slice(1));
      const body = fn?.childForFieldName('body');
      if (!body || fn?.children.some((c) => c?.type === 'async')) continue;
      const edits = [
        ...assertionSites(body)
          .reverse()
          .map((site) => mutateSite(site, body)),
        ...tableSites(body),
      ]
        .filter((e): e is Omit<MutantEdit, 'source'> => !!e)
        .slice(0, PER_TEST);
      out.push(...edits.map((e) => ({ ...e, source: id })));
    }
    return out;
  } finally {
    tree.delete();
  }
}

/** The definition of a test by its path inside the module: [name] or [Class, name] (a base class of the file for a mixin's test). */
export function findTest(root: Node, names: readonly string[]): Node | undefined {
  const defOf = (n: Node | null | undefined): Node | undefined => (n?.type === 'decorated_definition' ? (n.childForFieldName('definition') ?? undefined) : (n ?? undefined));
  const members = (block: Node) => block.namedChildren.map(defOf).filter((d): d is Node => !!d);
  const byName = (block: Node, type: string, name: string) => members(block).find((d) => d.type === type && d.childForFieldName('name')?.text === name);
  if (names.length === 1) return byName(root, 'function_definition', names[0]!);
  if (names.length !== 2) return undefined;
  const seen = new Set<string>();
  const todo = [names[0]!];
  while (todo.length) {
    const cls = byName(root, 'class_definition', todo.shift()!);
    const body = cls?.childForFieldName('body');
    if (!cls || !body) continue;
    const fn = byName(body, 'function_definition', names[1]!);
    if (fn) return fn;
    for (const b of cls.childForFieldName('superclasses')?.namedChildren ?? []) {
      if (b?.type === 'identifier' && !seen.has(b.text)) {
        seen.add(b.text);
        todo.push(b.text);
      }
    }
  }
  return undefined;
}

/** Table-driven tests (`for args, expected in [(...), ...]:`): the last row's answer changed, the table iterated as a literal or bound to a name before. */
function tableSites(body: Node): (Omit<MutantEdit, 'source'> | undefined)[] {
  return body
    .descendantsOfType('for_statement')
    .filter((f): f is Node => !!f)
    .reverse()
    .map((f) => {
      const right = f.childForFieldName('right');
      const table = right?.type === 'identifier' ? boundLiteral(body, right.text, f.startIndex) : right;
      return table && ['list', 'tuple'].includes(table.type) ? mutateLiteral(table, false) : undefined;
    });
}
