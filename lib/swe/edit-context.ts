// Edit mode's code context (SWE-RL's oracle setting): the files the gold patch touches, each cut around the
// functions holding the touched lines and widened by a margin as far as a token budget allows, with line numbers as
// the file_editor's views print them (`cat -n`). Elided stretches show as one `...` row. Pure apart from the parser.
import { numberLines } from './tools.ts';
import { pythonParser } from './python-outline.ts';
import { touchedLines } from './similarity.ts';
import type { Node } from 'web-tree-sitter';

export interface ContextFile {
  path: string;
  /** the file at the base commit; null when the task creates it */
  content: string | null;
  /** old lines (1-based) the gold patch touches */
  touched: readonly number[];
}

export interface EditContext {
  /** the files as the prompt shows them */
  text: string;
  /** tokens of `text` as `countTokens` counts them */
  tokens: number;
  budget: number;
  /** how it fits: whole files; the touched functions plus `margin` lines each side; only `margin` lines around the touched lines; over the budget even so */
  fit: 'whole' | 'functions' | 'lines' | 'over';
  margin: number;
  /** lines carry their numbers (the default; `edit.lineNumbers: false` shows them as they are) */
  numbered?: boolean;
  /** per file: its line count and the 1-based ranges shown */
  files: { path: string; lines: number; shown: [number, number][] }[];
}

/** Line ranges (1-based, inclusive) of the innermost function or class (with its decorators) around each touched line. */
export async function enclosingDefinitions(path: string, content: string, touched: readonly number[]): Promise<[number, number][]> {
  if (!path.endsWith('.py')) return touched.map((l) => [l, l]);
  const tree = (await pythonParser()).parse(content);
  if (!tree) return touched.map((l) => [l, l]);
  try {
    const defs: [number, number][] = [];
    const visit = (n: Node): void => {
      if (n.type === 'function_definition' || n.type === 'class_definition') {
        const outer = n.parent?.type === 'decorated_definition' ? n.parent : n;
        defs.push([outer.startPosition.row + 1, n.endPosition.row + 1]);
      }
      for (const c of n.namedChildren) if (c) visit(c);
    };
    visit(tree.rootNode);
    return touched.map((l) => {
      // the innermost: the shortest definition holding the line
      const holding = defs.filter(([a, b]) => a <= l && l <= b).sort((x, y) => x[1] - x[0] - (y[1] - y[0]));
      return holding[0] ?? [l, l];
    });
  } finally {
    tree.delete();
  }
}

/**
 * Localization of a predicted edit (edit.localizeWeight): per file either side changes, the share of the innermost
 * definitions holding the gold's changed lines (a line outside any: that line) in which the prediction changes a line
 * too; the mean over those files, 0 for a file only one side changes (as the located similarity averages them).
 */
export async function localizedShare(original: ReadonlyMap<string, string | null>, oracleNew: ReadonlyMap<string, string>, predNew: ReadonlyMap<string, string>): Promise<number> {
  const shares: number[] = [];
  for (const path of [...new Set([...oracleNew.keys(), ...predNew.keys()])].sort()) {
    const old = original.get(path) ?? '';
    const gold = oracleNew.has(path) ? [...touchedLines(old, oracleNew.get(path)!)] : [];
    const mine = predNew.has(path) ? [...touchedLines(old, predNew.get(path)!)] : [];
    if (gold.length === 0 && mine.length === 0) continue;
    if (gold.length === 0 || mine.length === 0) {
      shares.push(0);
      continue;
    }
    const spans = [...new Map((await enclosingDefinitions(path, old, gold)).map((r) => [r.join('-'), r])).values()];
    shares.push(spans.filter(([a, b]) => mine.some((l) => a <= l && l <= b)).length / spans.length);
  }
  return shares.length ? shares.reduce((a, b) => a + b, 0) / shares.length : 0;
}

/** Sorted, merged ranges (adjacent ones join), clamped to 1..n. */
function mergeRanges(ranges: [number, number][], n: number): [number, number][] {
  const out: [number, number][] = [];
  for (const [a, b] of [...ranges].map(([a, b]): [number, number] => [Math.max(1, a), Math.min(n, b)]).sort((x, y) => x[0] - y[0])) {
    if (a > b) continue;
    const last = out.at(-1);
    if (last && a <= last[1] + 1) last[1] = Math.max(last[1], b);
    else out.push([a, b]);
  }
  return out;
}

function fileLines(content: string): string[] {
  if (content === '') return [];
  return (content.endsWith('\n') ? content.slice(0, -1) : content).split('\n');
}

/** One file's block: `### path` then its shown lines (numbered, or as they are), `...` for each elided stretch, in a fence. */
function renderFile(path: string, lines: string[] | null, shown: [number, number][], numbered: boolean): string {
  if (lines === null) return `\`\`\`\n### ${path}\n(a new file: it does not exist yet)\n\`\`\``;
  const rows: string[] = [];
  let next = 1;
  for (const [a, b] of shown) {
    if (a > next) rows.push('...');
    rows.push(numbered ? numberLines(lines.slice(a - 1, b), a) : lines.slice(a - 1, b).join('\n'));
    next = b + 1;
  }
  if (next <= lines.length) rows.push('...');
  return `\`\`\`\n### ${path}\n${rows.join('\n')}\n\`\`\``;
}

/**
 * The context of `files` within `budget` tokens: whole files when they fit; else the touched functions widened by the
 * largest margin that fits; else windows of the largest margin around the touched lines (down to the lines alone).
 */
export async function buildEditContext(
  files: readonly ContextFile[],
  budget: number,
  countTokens: (text: string) => number,
  opts: { lineNumbers?: boolean } = {},
): Promise<EditContext> {
  const numbered = opts.lineNumbers ?? true;
  const parsed = await Promise.all(
    files.map(async (f) => {
      const lines = f.content === null ? null : fileLines(f.content);
      const touched = lines === null ? [] : f.touched.map((l) => Math.min(Math.max(1, l), Math.max(1, lines.length)));
      const defs = lines === null ? [] : await enclosingDefinitions(f.path, f.content!, touched);
      return { path: f.path, lines, touched, defs };
    }),
  );
  const layout = (anchor: 'defs' | 'touched' | 'whole', margin: number) =>
    parsed.map((f) => {
      const n = f.lines?.length ?? 0;
      const base: [number, number][] = anchor === 'whole' ? [[1, n]] : anchor === 'defs' ? f.defs : f.touched.map((l) => [l, l]);
      return {
        path: f.path,
        lines: f.lines,
        shown: mergeRanges(
          base.map(([a, b]) => [a - margin, b + margin]),
          n,
        ),
      };
    });
  const measure = (l: ReturnType<typeof layout>) => {
    const text = l.map((f) => renderFile(f.path, f.lines, f.shown, numbered)).join('\n\n');
    return { text, tokens: countTokens(text), l };
  };
  const result = (m: ReturnType<typeof measure>, fit: EditContext['fit'], margin: number): EditContext => ({
    text: m.text,
    tokens: m.tokens,
    budget,
    fit,
    margin,
    numbered,
    files: m.l.map((f) => ({ path: f.path, lines: f.lines?.length ?? 0, shown: f.shown })),
  });
  const whole = measure(layout('whole', 0));
  if (whole.tokens <= budget) return result(whole, 'whole', 0);
  const longest = Math.max(0, ...parsed.map((f) => f.lines?.length ?? 0));
  for (const anchor of ['defs', 'touched'] as const) {
    const at = (m: number) => measure(layout(anchor, m));
    let best = at(0);
    if (best.tokens > budget) continue;
    // the largest margin that fits (the text grows with the margin)
    let lo = 0;
    let hi = longest;
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      const m = at(mid);
      if (m.tokens <= budget) {
        lo = mid;
        best = m;
      } else hi = mid - 1;
    }
    return result(best, anchor === 'defs' ? 'functions' : 'lines', lo);
  }
  return result(measure(layout('touched', 0)), 'over', 0);
}

/** The setting a report names: where the context comes from and how it was cut. */
export function describeContext(c: Pick<EditContext, 'fit' | 'margin' | 'tokens' | 'budget' | 'files' | 'numbered'>): string {
  const cut = { whole: 'whole files', functions: `touched functions ±${c.margin} lines`, lines: `touched lines ±${c.margin} lines`, over: 'touched lines only, over the budget' }[
    c.fit
  ];
  return `oracle files (${c.files.length}), ${cut}, ${c.tokens}/${c.budget} tokens, ${c.numbered === false ? 'lines without numbers' : 'numbered lines'}`;
}
