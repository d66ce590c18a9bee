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
    const file: FilePatch = { oldPath: m[1]!, newPath: m[2]!, hunks: [] };
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
      i += 2;
    }
    while (i < lines.length && lines[i]!.startsWith('@@')) {
      const h = HUNK_RE.exec(lines[i]!);
      if (!h) return { ok: false, error: `bad hunk header at line ${i + 1}` };
      let oldLeft = h[2] === undefined ? 1 : Number(h[2]);
      let newLeft = h[4] === undefined ? 1 : Number(h[4]);
      const body: string[] = [];
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
