// The condensed view of a Python file that R2E-Gym's file_editor shows (and DeepSWE's policy was
// trained on): a `view` of a .py file longer than CONDENSE_OVER_LINES, without `view_range`, keeps
// every line but the bodies of functions longer than 3 lines and the middle of long class
// docstrings, each replaced by one "... eliding lines a-b ..." row; line numbers stay the file's own.
// Parsed with tree-sitter (web-tree-sitter + the tree-sitter-python grammar as WebAssembly): no
// Python interpreter, no native build, and the same result whatever Python the task image has.
import { createRequire } from 'node:module';
import { Language, Parser, type Node } from 'web-tree-sitter';

/** Python files longer than this are condensed when viewed whole (R2E-Gym's threshold). */
export const CONDENSE_OVER_LINES = 150;
/** a function body spanning at least this many lines is elided */
const MIN_BODY_LINES = 4;
/** a class docstring spanning at least this many lines keeps only its first and last line */
const MIN_DOCSTRING_LINES = 5;

/** One row of the view: a line of the file (1-based `line`), or an elision notice at the first line it hides. */
export interface OutlineRow {
  line: number;
  text: string;
  elided?: [number, number];
}

let parser: Promise<Parser> | undefined;

/** The tree-sitter Python parser (loaded once; also used by the grader's canaries, lib/swe/canaries.ts). */
export function pythonParser(): Promise<Parser> {
  parser ??= (async () => {
    await Parser.init();
    const wasm = createRequire(import.meta.url).resolve('tree-sitter-python/tree-sitter-python.wasm');
    const p = new Parser();
    p.setLanguage(await Language.load(wasm));
    return p;
  })();
  return parser;
}

/**
 * The condensed rows of Python source `text` (split on '\n' like the editor's other views), or null
 * when the source does not parse cleanly: then the caller shows the file as it is. Nested functions
 * inside an elided body are not listed again (R2E-Gym prints a notice for each; one is enough).
 */
export async function condensePython(text: string): Promise<OutlineRow[] | null> {
  const tree = (await pythonParser()).parse(text);
  if (!tree) return null;
  try {
    if (tree.rootNode.hasError) return null;
    const ranges: Array<[number, number]> = [];
    const visit = (n: Node): void => {
      if (n.type === 'function_definition') {
        const body = n.childForFieldName('body');
        if (body && body.endPosition.row - body.startPosition.row + 1 >= MIN_BODY_LINES) {
          ranges.push([body.startPosition.row, body.endPosition.row]);
          return;
        }
      } else if (n.type === 'class_definition') {
        const first = n.childForFieldName('body')?.namedChildren[0];
        const doc = first?.type === 'expression_statement' && first.namedChildCount === 1 ? first.namedChildren[0] : null;
        if (doc?.type === 'string' && first && first.endPosition.row - first.startPosition.row + 1 >= MIN_DOCSTRING_LINES) {
          ranges.push([first.startPosition.row + 1, first.endPosition.row - 1]);
        }
      }
      for (const c of n.namedChildren) if (c) visit(c);
    };
    visit(tree.rootNode);
    ranges.sort((a, b) => a[0] - b[0]);
    const lines = text.endsWith('\n') ? text.slice(0, -1).split('\n') : text.split('\n');
    const rows: OutlineRow[] = [];
    let next = 0;
    for (const [a, b] of ranges) {
      if (a < next) continue;
      for (; next < a; next++) rows.push({ line: next + 1, text: lines[next]! });
      rows.push({ line: a + 1, text: `... eliding lines ${a + 1}-${b + 1} ...`, elided: [a + 1, b + 1] });
      next = b + 1;
    }
    for (; next < lines.length; next++) rows.push({ line: next + 1, text: lines[next]! });
    return rows;
  } finally {
    tree.delete();
  }
}
