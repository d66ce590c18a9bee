// A small SWE task of our own for edit-mode tests: a Python package with a one-line bug in `sub` (its line is the
// same as `add`'s, so a search for it is ambiguous), a failing test added by the test patch, the repository as a
// source tarball (read on the host; built into an image for grading), the gold patch made by git.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { SweTask } from '../../lib/swe/task.ts';

export const OPS_PY = `"""Small arithmetic helpers."""


def add(a, b):
    return a + b


def sub(a, b):
    return a + b


def mul(a, b):
    return a * b
`;

export const FIXED_OPS_PY = OPS_PY.replace('def sub(a, b):\n    return a + b', 'def sub(a, b):\n    return a - b');

const TESTS_PY = `from calc.ops import add, mul


def test_add():
    assert add(2, 3) == 5


def test_mul():
    assert mul(2, 3) == 6
`;

const TESTS_WITH_SUB = TESTS_PY.replace('from calc.ops import add, mul', 'from calc.ops import add, mul, sub') + '\n\ndef test_sub():\n    assert sub(5, 3) == 2\n';

const git = (cwd: string, ...args: string[]) =>
  execFileSync('git', args, {
    cwd,
    encoding: 'utf8',
    env: {
      ...process.env,
      GIT_CONFIG_GLOBAL: '/dev/null',
      GIT_CONFIG_NOSYSTEM: '1',
      GIT_AUTHOR_NAME: 't',
      GIT_AUTHOR_EMAIL: 't@t',
      GIT_COMMITTER_NAME: 't',
      GIT_COMMITTER_EMAIL: 't@t',
    },
  });

function write(root: string, files: Record<string, string>): void {
  for (const [p, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, p)), { recursive: true });
    writeFileSync(join(root, p), text);
  }
}

/** Writes `dir/repo.tar.gz` and `dir/tasks.jsonl` (one task, `swerl__calc-sub`); returns the task and the file. */
export function writeEditTask(dir: string): { task: SweTask; tasksFile: string } {
  const work = mkdtempSync(join(tmpdir(), 'edit-task-'));
  try {
    const base = { 'calc/__init__.py': '', 'calc/ops.py': OPS_PY, 'tests/test_ops.py': TESTS_PY };
    write(work, base);
    git(work, 'init', '-q');
    git(work, 'add', '-A');
    git(work, 'commit', '-q', '-m', 'base');
    const baseCommit = git(work, 'rev-parse', 'HEAD').trim();
    execFileSync('tar', ['-czf', join(dir, 'repo.tar.gz'), '--exclude=.git', '-C', work, '.']);
    write(work, { 'calc/ops.py': FIXED_OPS_PY });
    const patch = git(work, 'diff');
    git(work, 'checkout', '-q', '--', '.');
    write(work, { 'tests/test_ops.py': TESTS_WITH_SUB });
    const testPatch = git(work, 'diff');
    const task = {
      instance_id: 'swerl__calc-sub',
      repo: 'swerl/calc',
      base_commit: baseCommit,
      problem_statement: 'sub(5, 3) returns 8 instead of 2: `sub` adds its arguments instead of subtracting them.',
      patch,
      test_patch: testPatch,
      FAIL_TO_PASS: ['tests/test_ops.py::test_sub'],
      PASS_TO_PASS: ['tests/test_ops.py::test_add', 'tests/test_ops.py::test_mul'],
      test_cmd: 'python3 -m pytest -rA -p no:cacheprovider tests/test_ops.py',
      source_tarball: 'repo.tar.gz',
    };
    const tasksFile = join(dir, 'tasks.jsonl');
    writeFileSync(tasksFile, JSON.stringify(task) + '\n');
    return { task: { ...task, source_tarball: join(dir, 'repo.tar.gz') } as SweTask, tasksFile };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** The gold fix as one reply in each edit format. */
export const GOLD_REPLIES = {
  'swe-rl':
    '<think>\nsub adds; it must subtract.\n</think>\n<solution>\n```python\n### calc/ops.py\n<<<<<<< SEARCH\ndef sub(a, b):\n    return a + b\n=======\ndef sub(a, b):\n    return a - b\n>>>>>>> REPLACE\n```\n</solution>',
  search_replace: '### calc/ops.py\n<<<<<<< SEARCH\ndef sub(a, b):\n    return a + b\n=======\ndef sub(a, b):\n    return a - b\n>>>>>>> REPLACE\n',
  whole_function: '```python\n### calc/ops.py\ndef sub(a, b):\n    return a - b\n```',
  numbered_lines: '```\n### calc/ops.py\n@@ 9\n    return a - b\n```',
} as const;
