// Problem statements of factory tasks (issue 28): written from what the failing tests show (their names,
// the assertion or exception message, the test files' frames of the traceback), never from the change.
// Every line that holds a line the fix removes or adds is dropped, so neither the injected bug nor the
// fixed code appears; `leakedLines` is the check the factory and its tests apply to any statement,
// the template's or an issue writer's. Pure.

/** What the factory's pytest plugin recorded of a failed test (activities/swerl_factory_pytest.py). */
export interface TestFailure {
  crash: string;
  entries: { path: string; line: number; lines: string[] }[];
}

export interface StatementInput {
  /** FAIL_TO_PASS ids, in the order to list them */
  failing: readonly string[];
  /** failure details by test id (those of the first failing tests are shown) */
  failures: Readonly<Record<string, TestFailure>>;
  /** repository-relative test files (frames from other files are never shown) */
  testFiles: ReadonlySet<string>;
  /** the gold patch: its removed and added lines must not appear */
  patch: string;
  /** picks among the template's phrasings */
  seed: number;
}

const MAX_LISTED = 10;
const MAX_SHOWN = 2;
const MAX_CRASH_LINES = 12;
/** changed lines shorter than this (`pass`, `else:`, `)`) say nothing about the fix */
const MIN_LEAK_CHARS = 6;

/** The stripped lines a patch removes or adds that are long enough to give the fix away. */
export function sensitiveLines(patch: string): string[] {
  const out = new Set<string>();
  for (const l of patch.split('\n')) {
    if (l.startsWith('+++ ') || l.startsWith('--- ') || !(l.startsWith('+') || l.startsWith('-'))) continue;
    const s = l.slice(1).trim();
    if (s.length >= MIN_LEAK_CHARS && !s.startsWith('#')) out.add(s);
  }
  return [...out];
}

/** Lines of `text` that contain a removed or added line of `patch` (should be none). */
export function leakedLines(text: string, patch: string): string[] {
  const bad = sensitiveLines(patch);
  return text.split('\n').filter((l) => bad.some((b) => l.includes(b)));
}

/** `text` without its leaking lines. */
export function scrub(text: string, patch: string): string {
  const bad = sensitiveLines(patch);
  return text
    .split('\n')
    .filter((l) => !bad.some((b) => l.includes(b)))
    .join('\n');
}

function relPath(p: string, testFiles: ReadonlySet<string>): string | undefined {
  const norm = p.replace(/^\/testbed\//, '').replace(/^\.\//, '');
  if (testFiles.has(norm)) return norm;
  for (const f of testFiles) if (norm.endsWith(`/${f}`)) return f;
  return /(^|\/)conftest\.py$/.test(norm) ? norm : undefined;
}

/** The failure as an issue would quote it: the crash message, then the frames in test files. */
function failureBlock(f: TestFailure, testFiles: ReadonlySet<string>): { crash: string; frames: string } {
  const crash = f.crash.split('\n').slice(0, MAX_CRASH_LINES).join('\n').trim();
  const frames: string[] = [];
  for (const e of f.entries) {
    const path = relPath(e.path, testFiles);
    if (!path) continue;
    // the source lines pytest shows for the frame, without its `E` (exception) lines: the crash says those
    const src = e.lines
      .filter((l) => !/^E\s/.test(l))
      .map((l) => l.replace(/^>/, ' ').trimEnd())
      .slice(-6);
    const indent = Math.min(...src.filter((l) => l.trim()).map((l) => /^ */.exec(l)![0].length));
    frames.push(`${path}:${e.line}:`, ...src.map((l) => `    ${l.slice(Number.isFinite(indent) ? indent : 0)}`));
  }
  return { crash, frames: frames.join('\n') };
}

const OPENINGS = [
  (n: number) => `After updating to the current code, ${n === 1 ? 'a test of the suite fails' : `${n} tests of the suite fail`}.`,
  (n: number) => `Running the test suite, I see ${n === 1 ? 'one failing test; it passed before' : `${n} failing tests; they passed before`}.`,
  (n: number) => `${n === 1 ? 'One test now fails' : `${n} tests now fail`} in the project's own test suite.`,
];
const TITLES = [
  (t: string, n: number) => `\`${t}\`${n > 1 ? ` and ${n - 1} other test${n > 2 ? 's' : ''}` : ''} failing`,
  (t: string, n: number) => `Test failure in \`${t}\`${n > 1 ? ` (and ${n - 1} more)` : ''}`,
];

/** The template statement: title, the failing tests, what the first of them say, what is expected. */
export function templateStatement(s: StatementInput): string {
  const n = s.failing.length;
  const short = (id: string) => id.split('::').slice(1).join('::') || id;
  const lines: string[] = [TITLES[s.seed % TITLES.length]!(short(s.failing[0]!), n), '', OPENINGS[s.seed % OPENINGS.length]!(n), '', 'Failing tests:', ''];
  for (const id of s.failing.slice(0, MAX_LISTED)) lines.push(`- \`${id}\``);
  if (n > MAX_LISTED) lines.push(`- … and ${n - MAX_LISTED} more`);
  let shown = 0;
  for (const id of s.failing) {
    const f = s.failures[id];
    if (!f || shown >= MAX_SHOWN) continue;
    const { crash, frames } = failureBlock(f, s.testFiles);
    if (!crash && !frames) continue;
    shown++;
    lines.push('', `\`${id}\` fails with:`, '', '```');
    if (frames) lines.push(frames);
    if (crash) lines.push(...crash.split('\n').map((l) => `E   ${l}`));
    lines.push('```');
  }
  lines.push('', 'Expected: these tests pass again, without changes to the tests, and the rest of the suite keeps passing.');
  return scrub(lines.join('\n'), s.patch);
}

/** The chat that asks an issue writer (`--issue-writer`) to turn the template into a user's bug report. */
export function issueWriterMessages(template: string): { role: 'system' | 'user'; content: string }[] {
  return [
    {
      role: 'system',
      content:
        'You write GitHub issues as a user of a Python library who hit a bug. Rewrite the report you are given as such an issue: ' +
        'a short title on the first line, then what you ran and what went wrong, quoting the failing test names and the error messages it gives. ' +
        'Do not guess the cause, do not propose a fix, and do not quote or invent any line of the library’s code.',
    },
    { role: 'user', content: template },
  ];
}
