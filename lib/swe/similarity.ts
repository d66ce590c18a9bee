// SWE-RL similarity reward (Wei et al. 2025, "SWE-RL"): −1 for a malformed or empty patch, else
// difflib SequenceMatcher(None, predicted, gold).ratio() ∈ [0, 1].
//
// What is compared: each patch is parsed into its `diff --git` file sections and normalised to
// `path` + the hunk bodies (context/`+`/`-` lines, hunk headers reduced to `@@`), files sorted by path, so
// that `index` hashes, hunk line numbers and file order do not count; files changed by only one side count as
// unmatched text. Characters are compared (as SWE-RL does), with autojunk off so long patches are not judged
// by their rare characters; above CHAR_LIMIT characters lines are compared instead, to bound the O(n·m) cost.
import difflib from 'difflib';

export const CHAR_LIMIT = 30_000;

export interface FilePatch {
  oldPath: string;
  newPath: string;
  /** hunk bodies, each as its lines (without the `@@` header) */
  hunks: string[][];
  /** each hunk's first old line (1-based; 0 for a hunk of an empty file) */
  oldStarts: number[];
  /** the file is created (`--- /dev/null`) or deleted (`+++ /dev/null`) */
  created?: boolean;
  deleted?: boolean;
}

export type ParsedPatch = { ok: true; files: FilePatch[] } | { ok: false; error: string };

const HUNK_RE = /^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@/;
const EXTENDED_HEADER_RE =
  /^(index |old mode |new mode |deleted file mode |new file mode |similarity index |dissimilarity index |rename from |rename to |copy from |copy to |Binary files |GIT binary patch)/;

/** Parses a git unified diff; checks every hunk's line counts against its header. */
export function parsePatch(patch: string): ParsedPatch {
  const lines = patch.replace(/\r\n/g, '\n').split('\n');
  const files: FilePatch[] = [];
  let i = lines.findIndex((l) => l.startsWith('diff --git '));
  if (i < 0) return { ok: false, error: 'no `diff --git` file section' };
  while (i < lines.length) {
    const header = lines[i]!;
    if (!header.startsWith('diff --git ')) {
      if (header.trim() === '' && lines.slice(i).every((l) => l.trim() === '')) break;
      return { ok: false, error: `unexpected line ${i + 1}: ${header.slice(0, 80)}` };
    }
    const m = /^diff --git a\/(.+?) b\/(.+)$/.exec(header);
    if (!m) return { ok: false, error: `bad file header at line ${i + 1}` };
    const file: FilePatch = { oldPath: m[1]!, newPath: m[2]!, hunks: [], oldStarts: [] };
    i++;
    let binary = false;
    while (i < lines.length && EXTENDED_HEADER_RE.test(lines[i]!)) {
      if (/^(Binary files |GIT binary patch)/.test(lines[i]!)) binary = true;
      i++;
    }
    if (binary) {
      while (i < lines.length && !lines[i]!.startsWith('diff --git ')) i++;
      files.push(file);
      continue;
    }
    if (i < lines.length && lines[i]!.startsWith('--- ')) {
      if (!lines[i + 1]?.startsWith('+++ ')) return { ok: false, error: `\`---\` without \`+++\` at line ${i + 1}` };
      if (lines[i] === '--- /dev/null') file.created = true;
      if (lines[i + 1] === '+++ /dev/null') file.deleted = true;
      i += 2;
    }
    while (i < lines.length && lines[i]!.startsWith('@@')) {
      const h = HUNK_RE.exec(lines[i]!);
      if (!h) return { ok: false, error: `bad hunk header at line ${i + 1}` };
      let oldLeft = h[2] === undefined ? 1 : Number(h[2]);
      let newLeft = h[4] === undefined ? 1 : Number(h[4]);
      const body: string[] = [];
      file.oldStarts.push(Number(h[1]));
      i++;
      while (oldLeft > 0 || newLeft > 0) {
        const l = lines[i];
        if (l === undefined) return { ok: false, error: 'patch ends inside a hunk' };
        const c = l[0];
        if (c === ' ' || (l === '' && i < lines.length - 1)) {
          oldLeft--;
          newLeft--;
        } else if (c === '-') oldLeft--;
        else if (c === '+') newLeft--;
        else if (c !== '\\') return { ok: false, error: `bad hunk line ${i + 1}: ${l.slice(0, 80)}` };
        if (oldLeft < 0 || newLeft < 0) return { ok: false, error: `hunk longer than its header says at line ${i + 1}` };
        body.push(l);
        i++;
      }
      while (i < lines.length && lines[i]!.startsWith('\\')) body.push(lines[i++]!);
      file.hunks.push(body);
    }
    files.push(file);
  }
  if (files.length === 0) return { ok: false, error: 'no file sections' };
  return { ok: true, files };
}

/** The comparable text of a parsed patch (see the file comment). */
export function normalisePatch(files: FilePatch[]): string {
  return [...files]
    .sort((a, b) => (a.newPath < b.newPath ? -1 : a.newPath > b.newPath ? 1 : 0))
    .map((f) => [`${f.oldPath} ${f.newPath}`, ...f.hunks.flatMap((h) => ['@@', ...h])].join('\n'))
    .join('\n');
}

/** SequenceMatcher ratio 2·M/T of two strings, characters (or lines above CHAR_LIMIT). */
export function sequenceRatio(a: string, b: string): number {
  if (a.length + b.length > CHAR_LIMIT) {
    return new difflib.SequenceMatcher<string[]>(null, a.split('\n'), b.split('\n'), false).ratio();
  }
  return new difflib.SequenceMatcher<string>(null, a, b, false).ratio();
}

export interface SimilarityResult {
  reward: number;
  reason: 'empty_patch' | 'malformed_patch' | 'similarity';
  error?: string;
}

/** SWE-RL reward of `predicted` against the gold patch: −1 when empty or malformed, else the ratio. */
export function similarityReward(predicted: string, gold: string): SimilarityResult {
  if (predicted.trim() === '') return { reward: -1, reason: 'empty_patch' };
  const p = parsePatch(predicted);
  if (!p.ok) return { reward: -1, reason: 'malformed_patch', error: p.error };
  const g = parsePatch(gold);
  const goldText = g.ok ? normalisePatch(g.files) : gold;
  return { reward: sequenceRatio(normalisePatch(p.files), goldText), reason: 'similarity' };
}

// ---------------------------------------------------------------------------------------------
// SWE-RL's reward as its released code computes it (facebookresearch/swe-rl, src/swerl/core/reward.py), for edit
// mode where the files' contents are known: per file, the change is Python's difflib.unified_diff of the old and new
// lines (str.splitlines, 3 lines of context, the `---`/`+++` header dropped, hunk headers kept); the reward is the
// mean, over every file either side changed, of SequenceMatcher(None, predicted change, oracle change,
// autojunk=False).ratio(), a file changed by one side only scoring 0; a malformed reply scores −1 (the caller's).

/** Python's str.splitlines(): the line boundaries SWE-RL's diffs split on (no terminators kept). */
export function pySplitlines(s: string): string[] {
  // Python's line boundaries include the file, group and record separators (U+001C–U+001E)
  // eslint-disable-next-line no-control-regex
  const out = s.split(/\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]/);
  if (out.length > 0 && out.at(-1) === '' && s.length > 0) out.pop();
  return s.length === 0 ? [] : out;
}

/** One file's change as SWE-RL compares it: the unified diff (n = 3) without its two header lines; '' when equal. */
export function unifiedChange(oldText: string, newText: string): string {
  // 3 lines of context: the port's default, as SWE-RL's
  const d = difflib.unifiedDiff(pySplitlines(oldText), pySplitlines(newText), { fromfile: 'old', tofile: 'new', lineterm: '' });
  return d.slice(2).join('\n');
}

/**
 * Old lines (1-based) a change touches: each replaced or deleted line, and for an insertion the line it goes before
 * (lines + 1 at the end), from the same line matching the diffs use.
 */
export function touchedLines(oldText: string, newText: string): Set<number> {
  const sm = new difflib.SequenceMatcher<string[]>(null, pySplitlines(oldText), pySplitlines(newText));
  const out = new Set<number>();
  for (const [tag, i1, i2] of sm.getOpcodes()) {
    if (tag === 'equal') continue;
    if (tag === 'insert') out.add(i1 + 1);
    for (let i = i1; i < i2; i++) out.add(i + 1);
  }
  return out;
}

export interface FileSimilarity {
  path: string;
  /** SequenceMatcher ratio of the two changes (0 when one side leaves the file alone) */
  ratio: number;
  /** the fraction of the oracle's touched old lines the prediction also touches (1 when the oracle touches none) */
  located: number;
}

/**
 * Per-file similarity of a predicted edit to the oracle's over the same original files (null: a file the task creates).
 * `reward`: SWE-RL's mean ratio; `located`: the mean of ratio × located, our rule (docs/edit-mode.md): an edit that
 * rewrites a similar line elsewhere shares most of the diff text yet none of the oracle's lines, and scores 0.
 */
export function changeSimilarity(
  original: ReadonlyMap<string, string | null>,
  oracleNew: ReadonlyMap<string, string>,
  predNew: ReadonlyMap<string, string>,
): { reward: number; located: number; files: FileSimilarity[] } {
  const files: FileSimilarity[] = [];
  const paths = [...new Set([...oracleNew.keys(), ...predNew.keys()])].sort();
  for (const path of paths) {
    const old = original.get(path) ?? '';
    const oracle = oracleNew.has(path) ? unifiedChange(old, oracleNew.get(path)!) : '';
    const pred = predNew.has(path) ? unifiedChange(old, predNew.get(path)!) : '';
    if (oracle === '' && pred === '') continue;
    if (oracle === '' || pred === '') {
      files.push({ path, ratio: 0, located: 0 });
      continue;
    }
    const gold = touchedLines(old, oracleNew.get(path)!);
    const mine = touchedLines(old, predNew.get(path)!);
    const hit = [...gold].filter((l) => mine.has(l)).length;
    files.push({ path, ratio: sequenceRatio(pred, oracle), located: gold.size ? hit / gold.size : 1 });
  }
  const mean = (f: (x: FileSimilarity) => number) => (files.length ? files.reduce((a, x) => a + f(x), 0) / files.length : 0);
  return { reward: mean((x) => x.ratio), located: mean((x) => x.ratio * x.located), files };
}

/** `[^\n]*\n` pieces of a text, the last one without a newline when the text does not end with one. */
function terminatedLines(text: string): string[] {
  return text.match(/[^\n]*\n|[^\n]+$/g) ?? [];
}

/**
 * The new contents of the files a git patch changes, applied to `files` (path → content; null or absent: the file
 * does not exist). Hunks must apply where their headers say (a gold patch against the same base does).
 */
export function applyPatch(files: ReadonlyMap<string, string | null>, patch: string): { ok: true; contents: Map<string, string> } | { ok: false; error: string } {
  const parsed = parsePatch(patch);
  if (!parsed.ok) return parsed;
  const contents = new Map<string, string>();
  for (const f of parsed.files) {
    const current = f.created ? '' : (files.get(f.oldPath) ?? null);
    if (current === null) return { ok: false, error: `${f.oldPath}: not among the files given` };
    const lines = terminatedLines(current);
    let offset = 0;
    for (const [h, body] of f.hunks.entries()) {
      const old: string[] = [];
      const neu: string[] = [];
      body.forEach((l, k) => {
        if (l.startsWith('\\')) return;
        const text = l.slice(1) + (body[k + 1]?.startsWith('\\') ? '' : '\n');
        if (l[0] !== '+') old.push(text);
        if (l[0] !== '-') neu.push(text);
      });
      const at = Math.max(0, f.oldStarts[h]! - 1) + offset + (old.length === 0 && f.oldStarts[h]! > 0 ? 1 : 0);
      if (old.some((x, k) => lines[at + k] !== x)) return { ok: false, error: `${f.oldPath}: hunk ${h + 1} does not apply at line ${f.oldStarts[h]}` };
      lines.splice(at, old.length, ...neu);
      offset += neu.length - old.length;
    }
    contents.set(f.newPath, f.deleted ? '' : lines.join(''));
  }
  return { ok: true, contents };
}
