// Edit mode's response formats (single-turn SWE-RL, Wei et al. 2025): parsing a model's reply into edits and
// applying them to the files the prompt showed. Four formats, selected by `env.edit.format`:
//   swe-rl          SWE-RL's exact format: <think>…</think><solution>…</solution>, in the solution fenced blocks
//                   "```LANG\n### PATH\n<<<<<<< SEARCH\n…\n=======\n…\n>>>>>>> REPLACE\n```"
//   search_replace  the same blocks without the think/solution tags, the fences optional
//   whole_function  a fenced block "### PATH" then one whole Python function or class, replacing its namesake
//   numbered_lines  a fenced block "### PATH" then sections "@@ START-END" + the lines replacing START..END
// A reply that cannot become a patch ends the episode with a named reason (MalformedReason). Pure: no I/O.
import { pythonParser } from './python-outline.ts';
import type { Node } from 'web-tree-sitter';

import { EDIT_FORMATS, type EditFormat } from './env-config.ts';

export { EDIT_FORMATS, type EditFormat };

/**
 * Why a reply is not a valid edit: no block in the format; a block naming a file the prompt did not show; a search
 * text none of whose lines is in the file, or a function the file does not define, or new text that is the
 * template's placeholder (the worked example or the template copied, or code made up: `foreign_search`); a search
 * text not found as a whole (some of its lines are the file's), or found more than once; a line range outside the
 * file or overlapping another; edits that leave every file as it was.
 */
export const MALFORMED_REASONS = ['no_block', 'missing_file', 'foreign_search', 'search_not_found', 'ambiguous_search', 'bad_range', 'no_change'] as const;
export type MalformedReason = (typeof MALFORMED_REASONS)[number];

export type Edit =
  | { kind: 'search_replace'; path: string; search: string; replace: string }
  | { kind: 'function'; path: string; code: string }
  | { kind: 'lines'; path: string; start: number; end: number; text: string };

export type ParsedEdits = { ok: true; edits: Edit[] } | { ok: false; reason: 'no_block'; error: string };
export type AppliedEdits = { ok: true; contents: Map<string, string> } | { ok: false; reason: MalformedReason; error: string };

/** A block's file name as written (`./x`, `/testbed/x` and `x` name the same file). */
export function normalisePath(p: string): string {
  return p
    .trim()
    .replace(/^\/testbed\//, '')
    .replace(/^(\.\/)+/, '');
}

// SWE-RL's block, as its released reward matches it (the fences and every separator line are required)
const SWE_RL_BLOCK = /```.*?\n### (.*)\n<<<<<<< SEARCH\n([\s\S]*?)\n=======\n([\s\S]*?)\n>>>>>>> REPLACE\n```/g;
const SWE_RL_TAGS = ['<think>', '</think>', '<solution>', '</solution>'];

/** Parses `response` in `format` into edits, in the order written. */
export function parseEdits(format: EditFormat, response: string): ParsedEdits {
  const text = response.replace(/\r\n/g, '\n');
  let edits: Edit[];
  switch (format) {
    case 'swe-rl': {
      for (const tag of SWE_RL_TAGS) {
        const n = text.split(tag).length - 1;
        if (n !== 1) return { ok: false, reason: 'no_block', error: `${tag} appears ${n} times (exactly once required)` };
      }
      if (text.split('<think>')[1]!.split('</think>')[0]!.trim() === '') return { ok: false, reason: 'no_block', error: 'the <think> section is empty' };
      const solution = text.split('<solution>')[1]!.split('</solution>')[0]!.trim();
      edits = [...solution.matchAll(SWE_RL_BLOCK)].map((m) => ({ kind: 'search_replace' as const, path: normalisePath(m[1]!), search: m[2]!, replace: m[3]! }));
      break;
    }
    case 'search_replace':
      edits = searchReplaceBlocks(text);
      break;
    case 'whole_function':
      edits = fencedFileBlocks(text, (body) => body.some((l) => DEF_LINE.test(l))).map((b) => ({ kind: 'function' as const, path: b.path, code: b.body.join('\n') }));
      break;
    case 'numbered_lines': {
      edits = [];
      for (const b of fencedFileBlocks(text, (body) => body.some((l) => LINES_HEADER.test(l)))) {
        let cur: { start: number; end: number; lines: string[] } | undefined;
        const flush = () => cur && edits.push({ kind: 'lines', path: b.path, start: cur.start, end: cur.end, text: cur.lines.join('\n') });
        for (const line of b.body) {
          const h = LINES_HEADER.exec(line);
          if (h) {
            flush();
            cur = { start: Number(h[1]), end: Number(h[2] ?? h[1]), lines: [] };
          } else cur?.lines.push(line);
        }
        flush();
      }
      break;
    }
    default:
      throw new Error(`edit format: unknown ${JSON.stringify(format)} (expected one of ${EDIT_FORMATS.join(', ')})`);
  }
  if (edits.length === 0) return { ok: false, reason: 'no_block', error: `no ${format} edit block in the reply` };
  return { ok: true, edits };
}

/**
 * `### PATH`, `<<<<<<< SEARCH`, lines, `=======`, lines, `>>>>>>> REPLACE`, read line by line (fences ignored). A block
 * without its `### PATH` line names no file (path ''): applyEdits gives it the one file shown, if only one was.
 */
function searchReplaceBlocks(text: string): Edit[] {
  const lines = text.split('\n');
  const out: Edit[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (lines[i]!.trim() !== '<<<<<<< SEARCH') continue;
    const head = i > 0 ? /^###\s+(\S.*)$/.exec(lines[i - 1]!) : null;
    const sep = lines.findIndex((l, k) => k > i && l.trim() === '=======');
    const end = sep < 0 ? -1 : lines.findIndex((l, k) => k > sep && l.trim() === '>>>>>>> REPLACE');
    if (end < 0) break;
    // one separator per block: a second one makes the block malformed (a model rewarded for such blocks learned to
    // repeat the line until its reply was cut)
    if (lines.slice(sep + 1, end).some((l) => l.trim() === '=======')) {
      i = end;
      continue;
    }
    out.push({ kind: 'search_replace', path: head ? normalisePath(head[1]!) : '', search: lines.slice(i + 1, sep).join('\n'), replace: lines.slice(sep + 1, end).join('\n') });
    i = end;
  }
  return out;
}

const LINES_HEADER = /^@@\s*(\d+)(?:\s*-\s*(\d+))?\s*(?:@@)?\s*$/;

/**
 * Fenced blocks naming their file: the path and the lines after it. A block names it by its first line `### PATH` (the
 * format), or, if `isEdit(body)` (the block holds what an edit of the format must: a def line, an `@@` line), by a
 * line `### PATH` just before the fence, or not at all (path '': applyEdits gives it the one file shown, if only one
 * was). Qwen2.5-Coder-0.5B wrote its header above the fence in about half of its whole_function replies (11-29); a
 * fence without a header holding no edit (the traceback quoted back) is not a block.
 */
function fencedFileBlocks(text: string, isEdit: (body: string[]) => boolean): { path: string; body: string[] }[] {
  const out: { path: string; body: string[] }[] = [];
  for (const m of text.matchAll(/```[^\n]*\n([\s\S]*?)(?:\n)?```/g)) {
    const [first, ...rest] = m[1]!.split('\n');
    const head = /^###\s+(\S.*)$/.exec(first ?? '');
    if (head) {
      out.push({ path: normalisePath(head[1]!), body: rest });
      continue;
    }
    const body = m[1]!.split('\n');
    if (!isEdit(body)) continue;
    const before = text.slice(0, m.index).replace(/\s+$/, '').split('\n').pop() ?? '';
    const above = /^###\s+(\S.*)$/.exec(before.trim());
    out.push({ path: above ? normalisePath(above[1]!) : '', body });
  }
  return out;
}

/**
 * Applies `edits` to `files` (path → content as the prompt showed it; null: a file the task creates), in order.
 * Our rule (stricter than SWE-RL's replace-every-occurrence): a search text must occur exactly once, at the start of a
 * line; an empty one only creates a missing file. Returns the new content of every file an edit named.
 */
export async function applyEdits(files: ReadonlyMap<string, string | null>, edits: readonly Edit[]): Promise<AppliedEdits> {
  const contents = new Map<string, string>();
  const ranges = new Map<string, { start: number; end: number; text: string }[]>();
  const shown = [...files.keys()];
  for (const named of edits) {
    // a block that names no file edits the one file shown; with several shown it names none of them
    const e = named.path === '' && shown.length === 1 ? { ...named, path: shown[0]! } : named;
    if (e.path === '') return fail('missing_file', `a block names no file, and ${shown.length} files were shown (${shown.join(', ')})`);
    if (!files.has(e.path)) return fail('missing_file', `${e.path} is not one of the files shown (${shown.join(', ')})`);
    const placeholder = templateLine(e.kind === 'search_replace' ? e.replace : e.kind === 'function' ? e.code : e.text);
    if (placeholder !== null) return fail('foreign_search', `a block of ${e.path} writes the template's placeholder, not code: ${JSON.stringify(placeholder)}`);
    const original = files.get(e.path) ?? null;
    const current = contents.get(e.path) ?? original ?? '';
    if (e.kind === 'lines') {
      if (original === null) return fail('bad_range', `${e.path} does not exist yet: numbered lines cannot edit it`);
      ranges.set(e.path, [...(ranges.get(e.path) ?? []), e]);
      continue;
    }
    const next = e.kind === 'search_replace' ? replaceOnce(current, e, original === null) : await replaceDefinitions(current, e);
    if (typeof next !== 'string') return next;
    contents.set(e.path, next);
  }
  for (const [path, rs] of ranges) {
    const next = replaceLines(files.get(path)!, rs, path);
    if (typeof next !== 'string') return next;
    contents.set(path, next);
  }
  if ([...contents].every(([p, c]) => c === (files.get(p) ?? ''))) return fail('no_change', 'the edits leave every file as it was');
  return { ok: true, contents };
}

/**
 * The lines by which the prompt's templates (edit.example "template", lib/swe/prompts.ts) describe a block's parts
 * instead of showing code. A block whose new text holds one copied the template, as a copy of the worked example does;
 * it scores as low (`foreign_search`), not as an edit that merely breaks the syntax. Loosely matched (case, a leading
 * "the", a missing comma, trailing punctuation, runs of spaces): on 11-29 Qwen2.5-Coder-0.5B learned to write "same
 * lines with the fix" under a copied context, which the exact line missed and the graded scheme paid −0.75.
 */
export const TEMPLATE_LINES: readonly RegExp[] = [
  /^(the )?lines of \S+ to change,? copied exactly$/i,
  /^(the )?same lines,? with (the )?fix(es)?$/i,
  /^(the )?whole function of \S+ that holds the fault,? fixed$/i,
  /^(the )?new lines that replace lines first to last$/i,
];

function templateLine(text: string): string | null {
  for (const line of text.split('\n')) {
    const t = line
      .trim()
      .replace(/\s+/g, ' ')
      .replace(/[.:;!]+$/, '');
    if (TEMPLATE_LINES.some((r) => r.test(t))) return line.trim();
  }
  return null;
}

function fail(reason: MalformedReason, error: string): AppliedEdits & { ok: false } {
  return { ok: false, reason, error };
}

function occurrences(haystack: string, needle: string): number {
  let n = 0;
  for (let i = haystack.indexOf(needle); i >= 0; i = haystack.indexOf(needle, i + 1)) n++;
  return n;
}

function replaceOnce(content: string, e: { path: string; search: string; replace: string }, creating: boolean): string | (AppliedEdits & { ok: false }) {
  if (e.search === e.replace) return fail('no_change', `a block of ${e.path} replaces its search text with itself`);
  if (e.search === '') return creating && content === '' ? e.replace : fail('ambiguous_search', `an empty search text in ${e.path} matches everywhere`);
  // a leading newline anchors the search text at the start of a line, as SWE-RL does
  const hay = `\n${content}`;
  const needle = `\n${e.search}`;
  const n = occurrences(hay, needle);
  if (n === 0) {
    const lines = new Set(content.split('\n').map((l) => l.trim()));
    const shared = e.search.split('\n').some((l) => l.trim() !== '' && lines.has(l.trim()));
    return fail(
      shared ? 'search_not_found' : 'foreign_search',
      `the search text is not in ${e.path}${shared ? '' : ' (no line of it is)'}: ${JSON.stringify(e.search.slice(0, 120))}`,
    );
  }
  if (n > 1) return fail('ambiguous_search', `the search text occurs ${n} times in ${e.path}: ${JSON.stringify(e.search.slice(0, 120))}`);
  return hay.replace(needle, () => `\n${e.replace}`).slice(1);
}

/** SWE-RL's own application (its reported reward): every occurrence replaced, a missing file read as empty. */
export function applySweRlEdits(files: ReadonlyMap<string, string | null>, edits: readonly Edit[]): Map<string, string> | null {
  const out = new Map<string, string>();
  for (const e of edits) {
    if (e.kind !== 'search_replace' || e.search === e.replace) return null;
    const hay = `\n${out.get(e.path) ?? files.get(e.path) ?? ''}`;
    if (!hay.includes(`\n${e.search}`)) return null;
    out.set(e.path, hay.split(`\n${e.search}`).join(`\n${e.replace}`).slice(1));
  }
  return out;
}

const DEF_LINE = /^(\s*)(?:async\s+def|def|class)\s+([A-Za-z_]\w*)/;

/**
 * A whole_function block's definitions: it is cut before each def or class line at the block's outermost def
 * indentation (with the decorators, comments and blank lines just above it), so that each replaces its namesake; lines
 * before the first definition go with it, but for blank ones. A trailing `...` no deeper than the def is the context's
 * elision mark copied, not code, and is dropped.
 */
function definitions(body: string[]): string[][] {
  const defs = body.map((l) => DEF_LINE.exec(l)).filter((m) => m !== null);
  if (defs.length === 0) return [body];
  const outer = Math.min(...defs.map((m) => m[1]!.length));
  const starts: number[] = [];
  body.forEach((l, i) => {
    const m = DEF_LINE.exec(l);
    if (!m || m[1]!.length !== outer) return;
    let k = i;
    while (k > 0 && (body[k - 1]!.trim() === '' || /^\s*[@#]/.test(body[k - 1]!)) && /^\s*/.exec(body[k - 1]!)![0].length <= outer) k--;
    // blank lines between two definitions belong to neither: the block's own spacing is kept by the file
    while (k < i && body[k]!.trim() === '') k++;
    starts.push(starts.length === 0 ? 0 : k);
  });
  return starts.map((a, j) => {
    const lines = body.slice(a, starts[j + 1] ?? body.length);
    // blank lines opening the block are the fence's spacing: kept, they added a blank line above the definition
    while (lines.length && lines[0]!.trim() === '') lines.shift();
    while (lines.length && (lines.at(-1)!.trim() === '' || (lines.at(-1)!.trim() === '...' && /^\s*/.exec(lines.at(-1)!)![0].length <= outer))) lines.pop();
    return lines;
  });
}

/**
 * A whole_function block: each of its definitions replaces its namesake, in turn. A definition the file does not have
 * (a helper the fix adds) goes with the one before it (or, first, the one after), so it lands beside it.
 */
async function replaceDefinitions(content: string, e: { path: string; code: string }): Promise<string | (AppliedEdits & { ok: false })> {
  const chunks = definitions(e.code.replace(/\s+$/, '').split('\n'));
  const names = chunks.length > 1 && e.path.endsWith('.py') ? new Set((await pythonDefinitions(content))?.map((d) => d.name)) : null;
  const groups: string[][] = [];
  let pending: string[] = [];
  for (const c of chunks) {
    const known = !names || names.has(DEF_LINE.exec(c.find((l) => DEF_LINE.test(l)) ?? '')?.[2] ?? '');
    if (known) {
      groups.push(pending.length ? [...pending, '', ...c] : c);
      pending = [];
    } else if (groups.length) groups.at(-1)!.push('', ...c);
    else pending = pending.length ? [...pending, '', ...c] : c;
  }
  // no definition the file has: the block as one, which fails on its first name
  if (pending.length) groups.push(pending);
  let current = content;
  for (const g of groups) {
    const next = await replaceFunction(current, { path: e.path, code: g.join('\n') });
    if (typeof next !== 'string') return next;
    current = next;
  }
  return current;
}

/** Every function and class of Python source, at any depth: its name, rows (decorators included) and indentation; null if it does not parse. */
async function pythonDefinitions(content: string): Promise<{ name: string; start: number; end: number; indent: string }[] | null> {
  const tree = (await pythonParser()).parse(content);
  if (!tree) return null;
  const rows = content.split('\n');
  const out: { name: string; start: number; end: number; indent: string }[] = [];
  try {
    const visit = (n: Node): void => {
      const name = n.type === 'function_definition' || n.type === 'class_definition' ? n.childForFieldName('name')?.text : undefined;
      if (name) {
        // decorators belong to the function they decorate
        const outer = n.parent?.type === 'decorated_definition' ? n.parent : n;
        out.push({ name, start: outer.startPosition.row, end: n.endPosition.row, indent: /^\s*/.exec(rows[n.startPosition.row]!)![0] });
      }
      for (const c of n.namedChildren) if (c) visit(c);
    };
    visit(tree.rootNode);
  } finally {
    tree.delete();
  }
  return out;
}

async function replaceFunction(content: string, e: { path: string; code: string }): Promise<string | (AppliedEdits & { ok: false })> {
  const codeLines = e.code.replace(/\s+$/, '').split('\n');
  const defAt = codeLines.findIndex((l) => DEF_LINE.test(l));
  if (defAt < 0) return fail('no_block', `the block for ${e.path} holds no def or class line`);
  const [, codeIndent, name] = DEF_LINE.exec(codeLines[defAt]!)!;
  if (!e.path.endsWith('.py')) return fail('search_not_found', `${e.path} is not a Python file: whole functions cannot be found in it`);
  const defs = await pythonDefinitions(content);
  if (!defs) return fail('search_not_found', `${e.path} could not be parsed`);
  const spans = defs.filter((d) => d.name === name);
  if (spans.length === 0) return fail('foreign_search', `no function or class ${name} in ${e.path}`);
  if (spans.length > 1) return fail('ambiguous_search', `${spans.length} functions or classes named ${name} in ${e.path}`);
  const s = spans[0]!;
  // the block keeps its own indentation relative to its def line; the def goes where the original one was
  const reindented = codeLines.map((l) => (l.trim() === '' ? '' : l.startsWith(codeIndent!) ? s.indent + l.slice(codeIndent!.length) : l));
  const lines = content.split('\n');
  // the first lines of the definition exactly, and no more: a copy of a definition the context showed cut short, which
  // leaves it as it is (a small model copies the neighbours of the function it fixes, as far as it saw them)
  const original = lines.slice(s.start, s.end + 1).map((l) => l.trimEnd());
  if (reindented.length < original.length && reindented.every((l, i) => l.trimEnd() === original[i])) return content;
  lines.splice(s.start, s.end - s.start + 1, ...reindented);
  return lines.join('\n');
}

function replaceLines(content: string, rs: { start: number; end: number; text: string }[], path: string): string | (AppliedEdits & { ok: false }) {
  const trailing = content.endsWith('\n');
  const lines = content === '' ? [] : (trailing ? content.slice(0, -1) : content).split('\n');
  const sorted = [...rs].sort((a, b) => a.start - b.start);
  for (const [k, r] of sorted.entries()) {
    if (r.start < 1 || r.end < r.start || r.end > lines.length) return fail('bad_range', `lines ${r.start}-${r.end} are not within ${path} (1-${lines.length})`);
    const prev = sorted[k - 1];
    if (prev && r.start <= prev.end) return fail('bad_range', `lines ${r.start}-${r.end} overlap lines ${prev.start}-${prev.end} of ${path}`);
  }
  for (const r of sorted.reverse()) lines.splice(r.start - 1, r.end - r.start + 1, ...(r.text === '' ? [] : r.text.split('\n')));
  return lines.join('\n') + (trailing && lines.length ? '\n' : '');
}

/** Whether Python source parses without errors (edit mode grades an edit that breaks a file that parsed). */
export async function pythonParses(source: string): Promise<boolean> {
  const tree = (await pythonParser()).parse(source);
  if (!tree) return false;
  try {
    return !tree.rootNode.hasError;
  } finally {
    tree.delete();
  }
}
