// Test-log parsers (DESIGN §3): pytest `-rA` (and `-v`), unittest verbose, Django and sympy
// formats → test id → status. Pure functions; ids are kept as the log spells them.

import type { TestOutcome } from './grading.ts';

export type TestStatus = Exclude<TestOutcome, 'MISSING'>;
export type TestLogFormat = 'pytest' | 'unittest' | 'django' | 'sympy' | 'auto';

/** A later status for the same test overrides an earlier one only when it is worse (a teardown ERROR after PASSED). */
const RANK: Record<TestStatus, number> = { SKIPPED: 0, XFAIL: 0, PASSED: 1, XPASS: 1, FAILED: 2, ERROR: 3 };

function put(m: Map<string, TestStatus>, id: string, s: TestStatus): void {
  const prev = m.get(id);
  if (prev === undefined || RANK[s] >= RANK[prev]) m.set(id, s);
}

const ANSI = /\x1b\[[0-9;]*[A-Za-z]/g;

function lines(log: string): string[] {
  return log.replace(ANSI, '').replace(/\r\n?/g, '\n').split('\n');
}

const PYTEST_STATUS: Record<string, TestStatus> = {
  PASSED: 'PASSED',
  FAILED: 'FAILED',
  ERROR: 'ERROR',
  SKIPPED: 'SKIPPED',
  XFAIL: 'XFAIL',
  XPASS: 'XPASS',
};

/** Strips the ` - message` pytest appends to FAILED/ERROR/XFAIL summary lines; parametrised ids may hold ` - `. */
function pytestId(rest: string): string {
  const close = rest.startsWith('[') ? -1 : rest.lastIndexOf(']');
  const from = rest.includes('::') && rest.indexOf('[') >= 0 && close > 0 ? close : 0;
  const dash = rest.indexOf(' - ', from);
  return (dash >= 0 ? rest.slice(0, dash) : rest).trim();
}

export function parsePytestLog(log: string): Map<string, TestStatus> {
  const m = new Map<string, TestStatus>();
  for (const raw of lines(log)) {
    const line = raw.trimEnd();
    // short test summary (-rA): "PASSED tests/x.py::T::t", "FAILED tests/x.py::t - AssertionError"
    const s = /^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (.+)$/.exec(line);
    if (s) {
      const rest = s[2]!;
      // "SKIPPED [1] tests/x.py:12: reason" names a location, not a test id
      if (/^\[\d+\] /.test(rest)) continue;
      put(m, pytestId(rest), PYTEST_STATUS[s[1]!]!);
      continue;
    }
    // verbose progress (-v): "tests/x.py::T::t PASSED    [ 10%]"
    const v = /^(\S+::\S.*?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?:\s+\[\s*\d+%\])?$/.exec(line);
    if (v) put(m, v[1]!, PYTEST_STATUS[v[2]!]!);
  }
  return m;
}

const UNITTEST_STATUS: [RegExp, TestStatus][] = [
  [/^ok$/, 'PASSED'],
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

/**
 * unittest `-v` and Django `-v 2`: "test_x (pkg.mod.Class) ... ok" (Python ≤ 3.10) or
 * "test_x (pkg.mod.Class.test_x) ... ok" (3.11+). A docstring line may sit between the name and
 * "... status". Ids: "test_x (pkg.mod.Class)" as SWE-bench writes them (the 3.11 suffix removed).
 */
export function parseUnittestLog(log: string): Map<string, TestStatus> {
  const m = new Map<string, TestStatus>();
  let pending: string | undefined;
  const head = /^(\w+) \(([\w.]+)\)/;
  const idOf = (name: string, cls: string) => `${name} (${cls.endsWith(`.${name}`) ? cls.slice(0, -name.length - 1) : cls})`;
  for (const raw of lines(log)) {
    const line = raw.trimEnd();
    const h = head.exec(line);
    if (h) pending = idOf(h[1]!, h[2]!);
    const st = / \.\.\. (.+)$/.exec(line);
    if (st && pending) {
      const s = unittestStatus(st[1]!.trim());
      if (s) put(m, pending, s);
      pending = undefined;
      continue;
    }
    if (!h && line.trim() === '') pending = undefined;
  }
  return m;
}

/** Django's runner prints the unittest format. */
export const parseDjangoLog = parseUnittestLog;

/** sympy's bin/test: "test_x ok", "test_y F", "test_z E" (f: expected fail, s: skipped, X: unexpected pass, w: slow skipped). */
export function parseSympyLog(log: string): Map<string, TestStatus> {
  const m = new Map<string, TestStatus>();
  const map: Record<string, TestStatus> = { ok: 'PASSED', F: 'FAILED', E: 'ERROR', f: 'XFAIL', s: 'SKIPPED', w: 'SKIPPED', X: 'XPASS' };
  for (const raw of lines(log)) {
    const r = /^(test_\w+)\s+(ok|F|E|f|s|w|X)(?:\s+\[[\d.]+s\])?$/.exec(raw.trim());
    if (r) put(m, r[1]!, map[r[2]!]!);
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
