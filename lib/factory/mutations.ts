// The task factory's bug strategies (issue 28): procedural mutations of Python source found with the
// tree-sitter parser we ship (lib/swe/python-outline.ts). Each mutation is one edit inside one function:
// a span of the file and its replacement. Pure: the factory's activities read files and run tests.
import type { Node } from 'web-tree-sitter';
import { pythonParser } from '../swe/python-outline.ts';
import { STRATEGIES, type Strategy } from './shapes.ts';

export { STRATEGIES, type Strategy } from './shapes.ts';

/** A function of a file: its qualified name and the lines its code objects start in (decorators included). */
export interface FunctionSite {
  file: string;
  name: string;
  /** 1-based first line (the first decorator's when decorated: Python's co_firstlineno) */
  startLine: number;
  endLine: number;
}

export interface Mutation {
  strategy: Strategy;
  file: string;
  fn: FunctionSite;
  /** UTF-16 offsets of the replaced span in the file's text */
  start: number;
  end: number;
  replacement: string;
  /** 1-based line of the span's start */
  line: number;
  /** what changed, e.g. "`<` → `<=`" (provenance only: never shown to an agent) */
  what: string;
}

/** The file's text with the mutations applied (spans must not overlap). */
export function applyMutations(text: string, muts: readonly Pick<Mutation, 'start' | 'end' | 'replacement'>[]): string {
  const sorted = [...muts].sort((a, b) => b.start - a.start);
  let out = text;
  let limit = Infinity;
  for (const m of sorted) {
    if (m.end > limit) throw new Error(`overlapping mutations at offset ${m.start}`);
    out = out.slice(0, m.start) + m.replacement + out.slice(m.end);
    limit = m.start;
  }
  return out;
}

/** Whether Python source parses without an error or a missing node (the compile check before any container). */
export async function parsesCleanly(text: string): Promise<boolean> {
  const tree = (await pythonParser()).parse(text);
  if (!tree) return false;
  try {
    return !tree.rootNode.hasError;
  } finally {
    tree.delete();
  }
}

const COMPARISON_SWAPS: Record<string, string[]> = {
  '<': ['<=', '>'],
  '<=': ['<', '>='],
  '>': ['>=', '<'],
  '>=': ['>', '<='],
  '==': ['!='],
  '!=': ['=='],
  in: ['not in'],
  'not in': ['in'],
  is: ['is not'],
  'is not': ['is'],
};
const ARITHMETIC_SWAPS: Record<string, string[]> = {
  '+': ['-'],
  '-': ['+'],
  '*': ['/'],
  '/': ['*'],
  '//': ['/'],
  '%': ['//'],
  '**': ['*'],
  '<<': ['>>'],
  '>>': ['<<'],
  '&': ['|'],
  '|': ['&'],
  '^': ['|'],
};
const BOOLEAN_SWAPS: Record<string, string[]> = { and: ['or'], or: ['and'] };
/** expressions `not` can precede without parentheses */
const PRIMARY = new Set([
  'identifier',
  'attribute',
  'call',
  'subscript',
  'parenthesized_expression',
  'true',
  'false',
  'none',
  'integer',
  'float',
  'string',
  'list',
  'tuple',
  'dictionary',
  'set',
]);
const REMOVABLE = new Set([
  'expression_statement',
  'if_statement',
  'for_statement',
  'while_statement',
  'return_statement',
  'raise_statement',
  'delete_statement',
  'continue_statement',
  'break_statement',
  'assert_statement',
  'with_statement',
]);
const NOT_LOCALS = new Set(['self', 'cls']);

/** The named children of `n` (web-tree-sitter's arrays may hold nulls). */
function kids(n: Node): Node[] {
  return n.namedChildren.filter((c): c is Node => c !== null);
}

/** Offsets of the whole lines a node spans (its line's start to after its last line's newline), or null when it shares a line. */
function wholeLines(text: string, n: Node): { from: number; to: number; indent: string } | null {
  const from = text.lastIndexOf('\n', n.startIndex - 1) + 1;
  const before = text.slice(from, n.startIndex);
  if (before.trim() !== '') return null;
  const nl = text.indexOf('\n', n.endIndex);
  const to = nl < 0 ? text.length : nl + 1;
  const after = text.slice(n.endIndex, nl < 0 ? text.length : nl).trim();
  if (after !== '' && !after.startsWith('#')) return null;
  return { from, to, indent: before };
}

function isDocstring(st: Node): boolean {
  const only = st.type === 'expression_statement' && st.namedChildCount === 1 ? st.namedChildren[0] : null;
  return only?.type === 'string' || only?.type === 'concatenated_string';
}

class Collector {
  readonly out: Mutation[] = [];
  constructor(
    readonly text: string,
    readonly file: string,
    readonly want: ReadonlySet<Strategy>,
  ) {}

  add(strategy: Strategy, fn: FunctionSite, start: number, end: number, replacement: string, what: string): void {
    if (!this.want.has(strategy) || this.text.slice(start, end) === replacement) return;
    const line = this.text.slice(0, start).split('\n').length;
    this.out.push({ strategy, file: this.file, fn, start, end, replacement, line, what });
  }
}

/** Every mutation the strategies in `want` make in `text` (a Python file at `file`), in source order; null when it does not parse. */
export async function enumerateMutations(file: string, text: string, want: ReadonlySet<Strategy> = new Set(STRATEGIES)): Promise<Mutation[] | null> {
  const tree = (await pythonParser()).parse(text);
  if (!tree) return null;
  try {
    if (tree.rootNode.hasError) return null;
    const c = new Collector(text, file, want);
    visit(c, tree.rootNode, [], null);
    return c.out;
  } finally {
    tree.delete();
  }
}

/** Every function of a file (qualified names, line ranges), or null when it does not parse. */
export async function functionsOf(file: string, text: string): Promise<FunctionSite[] | null> {
  const tree = (await pythonParser()).parse(text);
  if (!tree) return null;
  try {
    if (tree.rootNode.hasError) return null;
    const out: FunctionSite[] = [];
    const walk = (n: Node, scope: string[]): void => {
      for (const ch of kids(n)) {
        if (ch.type === 'function_definition') {
          const site = siteOf(file, ch, scope);
          out.push(site);
          walk(ch, [...scope, site.name.split('.').at(-1)!]);
        } else if (ch.type === 'class_definition') walk(ch, [...scope, ch.childForFieldName('name')?.text ?? '?']);
        else walk(ch, scope);
      }
    };
    walk(tree.rootNode, []);
    return out;
  } finally {
    tree.delete();
  }
}

function siteOf(file: string, def: Node, scope: string[]): FunctionSite {
  const outer = def.parent?.type === 'decorated_definition' ? def.parent : def;
  return { file, name: [...scope, def.childForFieldName('name')?.text ?? '?'].join('.'), startLine: outer.startPosition.row + 1, endLine: def.endPosition.row + 1 };
}

/** Walks the tree; `fn` is the innermost enclosing function (mutations happen only inside one). */
function visit(c: Collector, n: Node, scope: string[], fn: FunctionSite | null): void {
  if (n.type === 'function_definition') {
    const site = siteOf(c.file, n, scope);
    defaults(c, n, site);
    const body = n.childForFieldName('body');
    if (body) {
      wrongReturns(c, n, site);
      visit(c, body, [...scope, site.name.split('.').at(-1)!], site);
    }
    return;
  }
  if (n.type === 'class_definition') {
    const body = n.childForFieldName('body');
    if (body) visit(c, body, [...scope, n.childForFieldName('name')?.text ?? '?'], null);
    return;
  }
  if (fn) mutateNode(c, n, fn);
  for (const ch of kids(n)) visit(c, ch, scope, fn);
}

function mutateNode(c: Collector, n: Node, fn: FunctionSite): void {
  switch (n.type) {
    case 'comparison_operator':
      for (const op of n.children) if (op && !op.isNamed) swapOperator(c, fn, op, COMPARISON_SWAPS);
      break;
    case 'binary_operator':
    case 'boolean_operator': {
      const op = n.childForFieldName('operator');
      if (op) swapOperator(c, fn, op, n.type === 'boolean_operator' ? BOOLEAN_SWAPS : ARITHMETIC_SWAPS);
      break;
    }
    case 'augmented_assignment': {
      const op = n.childForFieldName('operator');
      const base = op?.text.slice(0, -1);
      if (op && base && ARITHMETIC_SWAPS[base])
        for (const to of ARITHMETIC_SWAPS[base]) c.add('swap-operator', fn, op.startIndex, op.endIndex, `${to}=`, `\`${op.text}\` → \`${to}=\``);
      break;
    }
    case 'integer':
      if (n.parent?.type !== 'default_parameter' && n.parent?.type !== 'typed_default_parameter') offByOne(c, fn, n, 'off-by-one');
      break;
    case 'if_statement':
    case 'elif_clause':
    case 'while_statement':
      negate(c, fn, n.childForFieldName('condition'));
      if (n.type === 'if_statement') for (const alt of n.childrenForFieldName('alternative')) if (alt) removeBranch(c, fn, alt);
      break;
    case 'conditional_expression':
      negate(c, fn, kids(n)[1] ?? null);
      break;
    case 'block':
      removeStatements(c, fn, n);
      break;
    case 'argument_list':
      swapArguments(c, fn, n);
      break;
  }
}

function swapOperator(c: Collector, fn: FunctionSite, op: Node, table: Record<string, string[]>): void {
  const from = op.text.replace(/\s+/g, ' ');
  for (const to of table[from] ?? []) c.add('swap-operator', fn, op.startIndex, op.endIndex, to, `\`${from}\` → \`${to}\``);
}

function offByOne(c: Collector, fn: FunctionSite, n: Node, strategy: Strategy): void {
  if (!/^(0|[1-9][0-9]{0,8})$/.test(n.text)) return;
  const v = Number(n.text);
  c.add(strategy, fn, n.startIndex, n.endIndex, String(v + 1), `\`${v}\` → \`${v + 1}\``);
  if (v > 0) c.add(strategy, fn, n.startIndex, n.endIndex, String(v - 1), `\`${v}\` → \`${v - 1}\``);
}

function negate(c: Collector, fn: FunctionSite, cond: Node | null): void {
  if (!cond) return;
  if (cond.type === 'not_operator') {
    const arg = cond.childForFieldName('argument');
    if (arg) c.add('negate-condition', fn, cond.startIndex, cond.endIndex, arg.text, 'condition negated (`not` removed)');
    return;
  }
  const text = PRIMARY.has(cond.type) ? `not ${cond.text}` : `not (${cond.text})`;
  c.add('negate-condition', fn, cond.startIndex, cond.endIndex, text, 'condition negated');
}

/** Removing a statement from a block; a block left empty gets `pass`. */
function removeStatements(c: Collector, fn: FunctionSite, block: Node): void {
  const stmts = kids(block).filter((s) => s.type !== 'comment');
  for (const st of stmts) {
    if (!REMOVABLE.has(st.type) || (st === stmts[0] && isDocstring(st))) continue;
    const span = wholeLines(c.text, st);
    if (!span) continue;
    const alone = stmts.length === 1 || (stmts.length === 2 && isDocstring(stmts[0]!) && st === stmts[1]);
    c.add('remove-statement', fn, span.from, span.to, alone ? `${span.indent}pass\n` : '', `\`${st.type.replace(/_statement$/, '')}\` statement removed`);
  }
}

function removeBranch(c: Collector, fn: FunctionSite, clause: Node): void {
  const span = wholeLines(c.text, clause);
  if (span) c.add('remove-statement', fn, span.from, span.to, '', `\`${clause.type.replace(/_clause$/, '')}\` branch removed`);
}

function swapArguments(c: Collector, fn: FunctionSite, args: Node): void {
  const all = kids(args).filter((a) => a.type !== 'comment');
  for (let i = 0; i + 1 < all.length; i++) {
    const [a, b] = [all[i]!, all[i + 1]!];
    const positional = (x: Node) => !['keyword_argument', 'list_splat', 'dictionary_splat', 'parenthesized_list_splat'].includes(x.type);
    if (!positional(a) || !positional(b) || a.text === b.text) continue;
    const between = c.text.slice(a.endIndex, b.startIndex);
    c.add('swap-arguments', fn, a.startIndex, b.endIndex, `${b.text}${between}${a.text}`, `arguments ${i + 1} and ${i + 2} swapped`);
  }
}

/** `return x` → `return y`, y another parameter or local assigned before that return. */
function wrongReturns(c: Collector, def: Node, fn: FunctionSite): void {
  const params: { name: string; at: number }[] = [];
  const params0 = def.childForFieldName('parameters');
  for (const p of params0 ? kids(params0) : []) {
    const id = p.type === 'identifier' ? p : (p.childForFieldName('name') ?? kids(p).find((x) => x.type === 'identifier'));
    if (id && id.type === 'identifier' && !NOT_LOCALS.has(id.text)) params.push({ name: id.text, at: -1 });
  }
  const locals: { name: string; at: number }[] = [...params];
  const returns: Node[] = [];
  const walk = (n: Node): void => {
    if (n.type === 'function_definition' || n.type === 'class_definition' || n.type === 'lambda') return;
    if (n.type === 'assignment' || n.type === 'augmented_assignment' || n.type === 'for_statement') {
      const left = n.childForFieldName('left');
      if (left?.type === 'identifier' && !NOT_LOCALS.has(left.text)) locals.push({ name: left.text, at: n.startIndex });
    }
    if (n.type === 'return_statement') returns.push(n);
    for (const ch of kids(n)) walk(ch);
  };
  const body = def.childForFieldName('body');
  if (body) for (const ch of kids(body)) walk(ch);
  for (const r of returns) {
    const v = kids(r)[0];
    if (v?.type !== 'identifier') continue;
    const seen = new Set<string>([v.text]);
    for (const l of locals) {
      if (l.at >= r.startIndex || seen.has(l.name)) continue;
      seen.add(l.name);
      c.add('wrong-return', fn, v.startIndex, v.endIndex, l.name, `returns \`${l.name}\` instead of \`${v.text}\``);
    }
  }
}

function defaults(c: Collector, def: Node, fn: FunctionSite): void {
  const params = def.childForFieldName('parameters');
  for (const p of params ? kids(params) : []) {
    if (p.type !== 'default_parameter' && p.type !== 'typed_default_parameter') continue;
    const v = p.childForFieldName('value');
    if (!v) continue;
    if (v.type === 'true') c.add('change-default', fn, v.startIndex, v.endIndex, 'False', 'default `True` → `False`');
    else if (v.type === 'false') c.add('change-default', fn, v.startIndex, v.endIndex, 'True', 'default `False` → `True`');
    else if (v.type === 'integer') offByOne(c, fn, v, 'change-default');
    else if (v.type === 'string' && /^(['"])[^'"\\{}]+\1$/.test(v.text))
      c.add('change-default', fn, v.startIndex, v.endIndex, `${v.text[0]}${v.text[0]}`, 'default string emptied');
  }
}
