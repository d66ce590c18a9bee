// Test-log parsers (DESIGN §3): pytest `-rA` (and `-v`), unittest verbose, Django and sympy formats →
// test id → status. Pure functions. Ids follow SWE-bench's conventions per runner (checked against its
// parsers on real logs: test/unit/testlog-real.test.ts, checks/swebench_agreement.py):
//   pytest    the node id as -rA prints it (cwd-relative), parameters included; where SWE-bench's parser
//             cuts an id at its first space (`test_p[a b]` → `test_p[a`) we keep the whole id.
//   unittest/Django  the text before " ... " on the status line: `test_x (pkg.mod.Class)` (Python ≤ 3.10),
//             `test_x (pkg.mod.Class.test_x)` (3.11+, kept as printed), or the docstring's first line
//             when the test has one; the `test_x (...)` line above a docstring is an alias for the same test.
//   sympy     the test function's name.
// The grader reads pytest runs from its results plugin (activities/grade.ts); these parsers serve the
// other runners, `swerl grade` logs and the agreement checks.
import type { TestOutcome } from './grading.ts';

export type TestStatus = Exclude<TestOutcome, 'MISSING'>;
export type TestLogFormat = 'pytest' | 'unittest' | 'django' | 'sympy' | 'auto';

/** When the same test is reported twice, the worse status stays (a teardown ERROR after PASSED). */
const RANK: Record<TestStatus, number> = { SKIPPED: 0, XFAIL: 0, PASSED: 1, XPASS: 2, FAILED: 3, ERROR: 4 };

function put(m: Map<string, TestStatus>, id: string, s: TestStatus): void {
  const prev = m.get(id);
  if (prev === undefined || RANK[s] >= RANK[prev]) m.set(id, s);
}

// eslint-disable-next-line no-control-regex -- ANSI escape sequences start with ESC
const ANSI = /\x1b\[[0-9;]*[A-Za-z]/g;

function lines(log: string): string[] {
  return log.replace(ANSI, '').replace(/\r\n?/g, '\n').split('\n');
}

/**
 * The node id at the start of `rest` (what follows the status word): `path::name` up to the first space,
 * or, with parameters, up to the first `]` that ends the line or is followed by a space (pytest appends
 * ` - message`, or in pytest < 7 an XPASS reason after a space). Parameters may hold spaces, `]` and ` - `.
 */
export function pytestIdAt(rest: string): string {
  const open = rest.indexOf('[');
  const space = rest.indexOf(' ');
  if (open < 0 || (space >= 0 && space < open)) return space < 0 ? rest : rest.slice(0, space);
  for (let i = rest.indexOf(']', open); i >= 0; i = rest.indexOf(']', i + 1)) {
    if (i === rest.length - 1 || rest[i + 1] === ' ') return rest.slice(0, i + 1);
  }
  return rest;
}

const SECTION = /^=+ (.*?) =+$/;

/**
 * pytest: the short test summary (`-rA`: "PASSED id", "FAILED id - message", "XFAIL id - reason") and
 * `-v` progress lines ("id PASSED [ 10%]"). Only the summary section and the progress part of the log are
 * read: captured output printed inside the FAILURES/PASSES sections may hold lines that look like results.
 * "SKIPPED [N] path:line: reason" names a location, not a test, and is skipped.
 */
export function parsePytestLog(log: string): Map<string, TestStatus> {
  const m = new Map<string, TestStatus>();
  const all = lines(log);
  const hasSummary = all.some((l) => SECTION.exec(l.trim())?.[1] === 'short test summary info');
  // sections: 'run' until the first report section, 'report' (ERRORS, FAILURES, PASSES, warnings...), 'summary'
  let where: 'run' | 'report' | 'summary' = 'run';
  for (const raw of all) {
    const line = raw.trimEnd();
    const sec = SECTION.exec(line.trim());
    if (sec) {
      const title = sec[1]!;
      if (title === 'short test summary info') where = 'summary';
      else if (title === 'test session starts') where = 'run';
      else if (where !== 'summary' || !/\d+ (passed|failed|error|skipped|xfailed|xpassed|deselected|warnings?)\b|no tests ran/.test(title)) where = 'report';
      continue;
    }
    if (hasSummary && where === 'report') continue;
    const s = /^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (.+)$/.exec(line);
    if (s && (where === 'summary' || !hasSummary)) {
      const rest = s[2]!;
      if (/^\[\d+\] /.test(rest)) continue;
      put(m, pytestIdAt(rest), s[1] as TestStatus);
      continue;
    }
    if (where === 'run' || !hasSummary) {
      // verbose progress: "tests/x.py::T::t PASSED  [ 10%]", pytest ≥ 7 may add " (reason)" after XFAIL/SKIPPED
      const v = /^(\S+::\S.*?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?: \(.*\))?(?:\s+\[\s*\d+%\])?$/.exec(line);
      if (v) put(m, v[1]!, v[2] as TestStatus);
    }
  }
  return m;
}

const UNITTEST_STATUS: [RegExp, TestStatus][] = [
  [/^ok$/, 'PASSED'],
  [/^OK$/, 'PASSED'],
  [/^FAIL$/, 'FAILED'],
  [/^ERROR$/, 'ERROR'],
  [/^skipped\b/, 'SKIPPED'],
  [/^expected failure$/, 'XFAIL'],
  [/^unexpected success$/, 'XPASS'],
];

function unittestStatus(word: string): TestStatus | undefined {
  for (const [re, s] of UNITTEST_STATUS) if (re.test(word)) return s;
  return undefined;
}

/** `test_x (pkg.mod.Class)` or `test_x (pkg.mod.Class.test_x)`: how unittest prints a test. */
const HEADER = /^(\w+) \(([\w.]+)\)/;

/**
 * unittest `-v` and Django `--verbosity 2`. Each test prints its description (`name (path)`, or that line
 * and then the docstring's first line), " ... ", then its status; output the test prints may come between
 * " ... " and the status, over several lines. "FAIL: name (path)" / "ERROR: ..." headers of the failure
 * report mark their tests too (subtest failures print no status of their own).
 */
export function parseUnittestLog(log: string): Map<string, TestStatus> {
  const m = new Map<string, TestStatus>();
  /** ids of the test whose status has not been printed yet */
  let pending: string[] = [];
  /** a `name (path)` line printed alone: the next line is its docstring */
  let header: string | undefined;
  const settle = (s: TestStatus) => {
    for (const id of pending) put(m, id, s);
  };
  for (const raw of lines(log)) {
    const line = raw.trimEnd();
    const fe = /^(FAIL|ERROR): (\w+ \([\w.]+\))/.exec(line);
    if (fe) {
      put(m, fe[2]!, fe[1] === 'FAIL' ? 'FAILED' : 'ERROR');
      pending = [];
      header = undefined;
      continue;
    }
    if (/^(=+|-+)$/.test(line) || /^Ran \d+ tests? in /.test(line)) {
      pending = [];
      header = undefined;
      continue;
    }
    const h = HEADER.exec(line);
    const dots = line.indexOf(' ... ');
    if (h && dots < 0 && line === h[0]) {
      // the docstring line follows
      header = line;
      pending = [];
      continue;
    }
    if (dots >= 0 && (h || header !== undefined)) {
      let id: string;
      let tail: string;
      if (h && line.startsWith(`${h[0]} ... `)) {
        id = h[0];
        tail = line.slice(h[0].length + 5);
      } else {
        // a docstring line: it ends at the last " ... " followed by a status, else at the first " ... "
        const last = line.lastIndexOf(' ... ');
        const lastTail = line.slice(last + 5).trim();
        const cut = unittestStatus(lastTail) ? last : dots;
        id = line.slice(0, cut);
        tail = line.slice(cut + 5);
      }
      pending = header !== undefined && !h ? [id, header] : [id];
      header = undefined;
      const s = unittestStatus(tail.trim());
      if (s) settle(s);
      else {
        // output printed after " ... ": the status may still end this line ("... output ok" is not a status)
        const end = / \.\.\. (ok|FAIL|ERROR|skipped .*|expected failure|unexpected success)$/.exec(tail);
        if (end) settle(unittestStatus(end[1]!)!);
      }
      continue;
    }
    header = undefined;
    if (pending.length) {
      const s = unittestStatus(line.trim());
      if (s) {
        settle(s);
        pending = [];
      }
    }
  }
  return m;
}

const SYMPY_STATUS: Record<string, TestStatus> = { ok: 'PASSED', F: 'FAILED', E: 'ERROR', f: 'XFAIL', X: 'XPASS', s: 'SKIPPED', w: 'SKIPPED', T: 'FAILED', K: 'FAILED' };

/**
 * sympy's bin/test --verbose: "test_x ok", "test_y F", "test_z E", "test_s <reason> s", "test_w Slow w",
 * f (expected failure), X (unexpected pass), T (timeout), K (interrupted); the last test of a file also
 * ends in "[OK]" or "[FAIL]"; output the test prints comes between its name and its status, which may
 * then stand on a later line.
 */
export function parseSympyLog(log: string): Map<string, TestStatus> {
  const m = new Map<string, TestStatus>();
  let pending: string | undefined;
  const statusAtEnd = (text: string): TestStatus | undefined => {
    const t = text
      .replace(/\s+\[(OK|FAIL)\]$/, '')
      .replace(/\s+\[[\d.]+s\]$/, '')
      .trimEnd();
    const last = /(?:^|\s)(ok|F|E|f|X|s|w|T|K)$/.exec(t);
    return last ? SYMPY_STATUS[last[1]!] : undefined;
  };
  for (const raw of lines(log)) {
    const line = raw.trim();
    const t = /^(test_\w+)(?:\s+(.*))?$/.exec(line);
    if (t) {
      pending = undefined;
      const s = t[2] !== undefined ? statusAtEnd(t[2]) : undefined;
      if (s) put(m, t[1]!, s);
      else pending = t[1];
      continue;
    }
    if (/\.py\[\d+\]/.test(line) || /^_{5,}/.test(line) || /tests finished:/.test(line)) {
      pending = undefined;
      continue;
    }
    if (pending) {
      const s = statusAtEnd(line);
      if (s && (line === 'ok' || /^(ok|[FEfXswTK])(\s+\[(OK|FAIL)\])?$/.test(line) || / (ok|[FEfXswTK])(\s+\[(OK|FAIL)\])?$/.test(line))) {
        put(m, pending, s);
        pending = undefined;
      }
    }
  }
  return m;
}

/** 'auto' merges every parser: the formats do not overlap. */
export function parseTestLog(log: string, format: TestLogFormat = 'auto'): Map<string, TestStatus> {
  switch (format) {
    case 'pytest':
      return parsePytestLog(log);
    case 'unittest':
    case 'django':
      return parseUnittestLog(log);
    case 'sympy':
      return parseSympyLog(log);
    case 'auto': {
      const m = parseUnittestLog(log);
      for (const [k, v] of parseSympyLog(log)) put(m, k, v);
      for (const [k, v] of parsePytestLog(log)) put(m, k, v);
      return m;
    }
  }
}

/** The log format a test command prints: Django's runtests.py, sympy's bin/test, unittest, pytest; 'auto' otherwise. */
export function logFormatOf(testCmd: string): TestLogFormat {
  if (/runtests\.py/.test(testCmd)) return 'django';
  if (/(^|[\s/])bin\/test(\s|$)/.test(testCmd)) return 'sympy';
  if (/-m\s+unittest\b/.test(testCmd)) return 'unittest';
  if (/(^|[\s;&|(/])(py\.test|pytest)(\s|$|;)/.test(testCmd)) return 'pytest';
  return 'auto';
}
