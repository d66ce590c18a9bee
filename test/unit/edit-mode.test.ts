// Edit mode (SWE-RL's single turn): parsing each reply format, applying edits, SWE-RL's similarity against values
// computed by hand, the malformed replies (the no-op included) and their scores, the context cut to a budget, and an
// episode of the environment on a task of our own (repository read from its tarball, patch by git).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { applyEdits, applySweRlEdits, MALFORMED_REASONS, parseEdits, TEMPLATE_LINES, type Edit } from '../../lib/swe/edit-format.ts';
import { applyPatch, changeSimilarity, touchedLines, unifiedChange } from '../../lib/swe/similarity.ts';
import { editReward, GRADED_MALFORMED, type EditOutcome } from '../../lib/swe/edit-reward.ts';
import { buildEditContext, localizedShare } from '../../lib/swe/edit-context.ts';
import { EditConfigSchema } from '../../lib/swe/env-config.ts';
import { validateConfig } from '../../lib/config.ts';
import { createSweEditEnvironment } from '../../activities/swe-env.ts';
import { FIXED_OPS_PY, GOLD_REPLIES, OPS_PY, writeEditTask } from '../helpers/edit-task.ts';

const files = new Map<string, string | null>([['calc/ops.py', OPS_PY]]);
const edits = (format: Parameters<typeof parseEdits>[0], reply: string): Edit[] => {
  const p = parseEdits(format, reply);
  assert.ok(p.ok, `${format} parses: ${p.ok ? '' : p.error}`);
  return p.edits;
};

test('each format parses its gold reply into edits that give the fixed file', async () => {
  for (const [format, reply] of Object.entries(GOLD_REPLIES)) {
    const a = await applyEdits(files, edits(format as keyof typeof GOLD_REPLIES, reply));
    assert.ok(a.ok, `${format}: ${a.ok ? '' : a.error}`);
    assert.equal(a.contents.get('calc/ops.py'), FIXED_OPS_PY, format);
  }
});

test("SWE-RL's exact format needs one of each tag, a thought, and fenced blocks", () => {
  assert.equal(parseEdits('swe-rl', GOLD_REPLIES.search_replace).ok, false, 'no tags');
  const noThought = GOLD_REPLIES['swe-rl'].replace('sub adds; it must subtract.', '  ');
  assert.match((parseEdits('swe-rl', noThought) as { error: string }).error, /<think> section is empty/);
  assert.match((parseEdits('swe-rl', `${GOLD_REPLIES['swe-rl']}</solution>`) as { error: string }).error, /<\/solution> appears 2 times/);
  // the blocks without fences are not SWE-RL's format (search_replace reads them)
  const unfenced = `<think>x</think><solution>\n${GOLD_REPLIES.search_replace}</solution>`;
  assert.equal(parseEdits('swe-rl', unfenced).ok, false);
  assert.equal(parseEdits('search_replace', unfenced).ok, true);
  for (const format of ['search_replace', 'whole_function', 'numbered_lines'] as const) {
    const p = parseEdits(format, 'I think the bug is in sub.');
    assert.deepEqual(p.ok ? null : p.reason, 'no_block', format);
  }
});

test('malformed edits end with a named reason: missing file, not found, found twice, bad range, no-op', async () => {
  const reason = async (format: Parameters<typeof parseEdits>[0], reply: string) => {
    const a = await applyEdits(files, edits(format, reply));
    return a.ok ? 'valid' : a.reason;
  };
  const sr = (path: string, search: string, replace: string) => `### ${path}\n<<<<<<< SEARCH\n${search}\n=======\n${replace}\n>>>>>>> REPLACE`;
  assert.equal(await reason('search_replace', sr('calc/other.py', 'x', 'y')), 'missing_file');
  // no "### PATH" line: the one file shown; with two shown, none of them
  const unnamed = '<<<<<<< SEARCH\ndef sub(a, b):\n    return a + b\n=======\ndef sub(a, b):\n    return a - b\n>>>>>>> REPLACE';
  assert.equal(await reason('search_replace', unnamed), 'valid');
  // a second ======= in a block: not a block (a model rewarded for them repeated the line until its reply was cut)
  assert.equal(parseEdits('search_replace', unnamed.replace('=======', '=======\n    x = 1\n=======')).ok, false);
  const two = await applyEdits(new Map([...files, ['calc/more.py', 'x = 1\n']]), edits('search_replace', unnamed));
  assert.ok(!two.ok && two.reason === 'missing_file' && /names no file, and 2 files were shown/.test(two.error), JSON.stringify(two));
  // no line of the search text in the file (the worked example copied, code made up), against a search text of the
  // file's lines that is not there as a whole
  assert.equal(await reason('search_replace', sr('calc/ops.py', '    return a / b', '    return a - b')), 'foreign_search');
  assert.equal(await reason('search_replace', sr('calc/ops.py', 'def square(side):\n    return side * 2', 'def square(side):\n    return side * side')), 'foreign_search');
  assert.equal(await reason('search_replace', sr('calc/ops.py', 'def sub(a, b):\n    return a / b', 'def sub(a, b):\n    return a - b')), 'search_not_found');
  // `return a + b` is both add's and sub's line: SWE-RL would replace both, we refuse to guess
  assert.equal(await reason('search_replace', sr('calc/ops.py', '    return a + b', '    return a - b')), 'ambiguous_search');
  assert.equal(await reason('search_replace', sr('./calc/ops.py', 'def sub(a, b):', 'def sub(a, b):')), 'no_change', 'search = replace');
  // two edits that cancel out leave the file as it was: a no-op too
  const undo = `${sr('calc/ops.py', 'def mul(a, b):', 'def times(a, b):')}\n${sr('calc/ops.py', 'def times(a, b):', 'def mul(a, b):')}`;
  assert.equal(await reason('search_replace', undo), 'no_change');
  assert.equal(await reason('whole_function', '```\n### calc/ops.py\ndef div(a, b):\n    return a / b\n```'), 'foreign_search');
  assert.equal(await reason('whole_function', '```\n### calc/ops.py\nreturn a - b\n```'), 'no_block');
  assert.equal(await reason('whole_function', '```\n### calc/ops.py\ndef sub(a, b):\n    return a + b\n```'), 'no_change');
  assert.equal(await reason('numbered_lines', '```\n### calc/ops.py\n@@ 12-20\nx\n```'), 'bad_range');
  assert.equal(await reason('numbered_lines', '```\n### calc/ops.py\n@@ 4-5\nx\n@@ 5\ny\n```'), 'bad_range');
  assert.equal(await reason('numbered_lines', '```\n### calc/ops.py\n@@ 9\n    return a + b\n```'), 'no_change');
  // each format's template line as the new text: the template copied
  assert.equal(await reason('whole_function', '```\n### calc/ops.py\nthe whole function of calc/ops.py that holds the fault, fixed\n```'), 'foreign_search');
  assert.equal(await reason('numbered_lines', '```\n### calc/ops.py\n@@ 9\nthe new lines that replace lines FIRST to LAST\n```'), 'foreign_search');
  assert.equal(await reason('search_replace', sr('calc/ops.py', 'def sub(a, b):', 'def sub(a, b):\n    # the same lines with the fix')), 'valid', 'a comment is code');
});

test('fenced formats: the file named above the fence, or by no header when one file is shown; a quoted traceback is no block', async () => {
  const fixed = 'def sub(a, b):\n    return a - b';
  const valid = async (format: 'whole_function' | 'numbered_lines', reply: string) => {
    const a = await applyEdits(files, edits(format, reply));
    assert.ok(a.ok, `${format}: ${a.ok ? '' : a.error}`);
    assert.equal(a.contents.get('calc/ops.py'), FIXED_OPS_PY, format);
  };
  await valid('whole_function', `### calc/ops.py\n\n\`\`\`python\n${fixed}\n\`\`\``);
  await valid('whole_function', `The fix:\n\`\`\`python\n${fixed}\n\`\`\``);
  await valid('numbered_lines', '### calc/ops.py\n```\n@@ 9\n    return a - b\n```');
  // the header above the fence names the file even when it is not the one shown
  const other = await applyEdits(files, edits('whole_function', `### calc/other.py\n\`\`\`python\n${fixed}\n\`\`\``));
  assert.ok(!other.ok && other.reason === 'missing_file', JSON.stringify(other));
  // a fence holding no edit of the format and no header (the issue's traceback quoted back) is skipped, not a block
  const quoted = '```\nTraceback (most recent call last):\n  File "calc/ops.py", line 9\nAssertionError\n```\n';
  assert.equal(parseEdits('whole_function', quoted).ok, false);
  assert.equal(parseEdits('numbered_lines', quoted).ok, false);
  await valid('whole_function', `${quoted}\`\`\`python\n${fixed}\n\`\`\``);
  // the header line inside the fence is still read as the format's: a def-less block there is no_block, as before
  assert.equal(parseEdits('whole_function', '```\n### calc/ops.py\nreturn a - b\n```').ok, true);
});

test('whole_function: each definition of a block replaces its namesake; a copy of a definition cut short leaves it be', async () => {
  const apply = async (reply: string) => {
    const a = await applyEdits(files, edits('whole_function', reply));
    assert.ok(a.ok, a.ok ? '' : a.error);
    return a.contents.get('calc/ops.py');
  };
  const reasonOf = async (reply: string) => {
    const a = await applyEdits(files, edits('whole_function', reply));
    return a.ok ? 'valid' : a.reason;
  };
  // sub fixed and mul changed in one block: both, each in its place (before, the block replaced sub with both)
  const both = await apply('```python\n### calc/ops.py\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return b * a\n```');
  assert.equal(both, FIXED_OPS_PY.replace('return a * b', 'return b * a'));
  // a blank line opening the fence is its spacing, not a line above the definition (before, the exact fix gained one)
  assert.equal(await apply('```python\n### calc/ops.py\n\n\ndef sub(a, b):\n    return a - b\n```'), FIXED_OPS_PY);
  // sub fixed, add copied as it is: the fix alone
  assert.equal(await apply('```python\n### calc/ops.py\ndef add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n```'), FIXED_OPS_PY);
  // mul copied as far as a cut context showed it, the elision mark with it: mul is left as it is
  assert.equal(await apply('```python\n### calc/ops.py\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n...\n```'), FIXED_OPS_PY);
  // a helper the file does not define goes with the definition before it
  assert.equal(
    await apply('```python\n### calc/ops.py\ndef sub(a, b):\n    return a + _neg(b)\n\n\ndef _neg(x):\n    return -x\n```'),
    OPS_PY.replace('def sub(a, b):\n    return a + b', 'def sub(a, b):\n    return a + _neg(b)\n\ndef _neg(x):\n    return -x'),
  );
  assert.equal(await reasonOf('```python\n### calc/ops.py\ndef _neg(x):\n    return -x\n\ndef _pos(x):\n    return x\n```'), 'foreign_search', 'no namesake at all');
  // an Ellipsis body is code, not the mark
  const cls = new Map([['m.py', 'class A:\n    def f(self):\n        return 1\n\n    def g(self):\n        return 2\n']]);
  const e = await applyEdits(cls, edits('whole_function', '```python\n### m.py\n@property\ndef f(self):\n    return 3\n\ndef g(self):\n    ...\n```'));
  assert.ok(e.ok);
  assert.equal(e.contents.get('m.py'), 'class A:\n    @property\n    def f(self):\n        return 3\n\n    def g(self):\n        ...\n');
});

test('whole functions keep their place and indentation; numbered lines delete and replace', async () => {
  const cls = new Map([['m.py', 'class A:\n    @staticmethod\n    def f(x):\n        return x\n\n    def g(self):\n        return 1\n']]);
  // the block written unindented lands at the method's indentation, its decorator replaced with it
  const a = await applyEdits(cls, edits('whole_function', '```python\n### m.py\n@staticmethod\ndef f(x):\n    return -x\n```'));
  assert.ok(a.ok);
  assert.equal(a.contents.get('m.py'), 'class A:\n    @staticmethod\n    def f(x):\n        return -x\n\n    def g(self):\n        return 1\n');
  const b = await applyEdits(files, edits('numbered_lines', '```\n### calc/ops.py\n@@ 12-13\n@@ 1\n"""Arithmetic."""\n```'));
  assert.ok(b.ok);
  assert.equal(b.contents.get('calc/ops.py'), OPS_PY.replace('"""Small arithmetic helpers."""', '"""Arithmetic."""').replace('def mul(a, b):\n    return a * b\n', ''));
});

test('similarity: SWE-RL ratio of the unified changes, checked against values computed by hand', () => {
  // one line a -> b (oracle) or a -> c (prediction): "@@ -1 +1 @@\n-a\n+b" vs "...+c", 17 characters each, 16 shared:
  // ratio = 2·16 / 34 = 16/17
  assert.equal(unifiedChange('a\n', 'b\n'), '@@ -1 +1 @@\n-a\n+b');
  const one = changeSimilarity(new Map([['f', 'a\n']]), new Map([['f', 'b\n']]), new Map([['f', 'c\n']]));
  assert.equal(one.reward, 16 / 17);
  assert.equal(one.located, 16 / 17, 'same line changed');
  // the oracle fixes line 1 (p -> r), the prediction rewrites the similar line 2 (q -> r): the changes share the
  // header (16), "\n+r" (3) and "p" (1): 2·20 / 48 = 5/6 by SWE-RL's rule, but none of the oracle's lines: 0 located
  const near = changeSimilarity(new Map([['f', 'p\nq\n']]), new Map([['f', 'r\nq\n']]), new Map([['f', 'p\nr\n']]));
  assert.equal(near.reward, 5 / 6);
  assert.equal(near.located, 0);
  // a file only one side changes scores 0 and counts in the mean
  const extra = changeSimilarity(
    new Map([
      ['f', 'a\n'],
      ['g', 'x\n'],
    ]),
    new Map([['f', 'b\n']]),
    new Map([
      ['f', 'b\n'],
      ['g', 'y\n'],
    ]),
  );
  assert.equal(extra.reward, 0.5);
  assert.deepEqual([...touchedLines('a\nb\nc\n', 'a\nB\nc\nd\n')], [2, 4]);
});

test('the gold patch applies to the original files', (t) => {
  const { task, dir } = writeEditTaskTmp();
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const a = applyPatch(files, task.patch);
  assert.ok(a.ok);
  assert.equal(a.contents.get('calc/ops.py'), FIXED_OPS_PY);
  const created = applyPatch(new Map(), 'diff --git a/n.py b/n.py\nnew file mode 100644\n--- /dev/null\n+++ b/n.py\n@@ -0,0 +1,2 @@\n+x = 1\n+y = 2\n');
  assert.ok(created.ok);
  assert.equal(created.contents.get('n.py'), 'x = 1\ny = 2\n');
  assert.equal(applyPatch(new Map([['calc/ops.py', 'other\n']]), task.patch).ok, false);
});

test('rewards: malformed replies never score above an honest miss; the graded scheme; hybrid below any fix', () => {
  const cfg = EditConfigSchema.parse({});
  const graded = EditConfigSchema.parse({ malformed: 'graded' });
  const miss: EditOutcome = { malformed: null, syntaxError: false, located: 0, swerl: 0.91 };
  const noop: EditOutcome = { malformed: 'no_change', syntaxError: false, located: 0, swerl: 0 };
  assert.equal(editReward('similarity', miss, cfg), 0, 'an honest miss (a similar line rewritten elsewhere) scores 0');
  assert.equal(editReward('similarity', noop, cfg), -1, 'the no-op scores below it');
  assert.equal(editReward('similarity', noop, { ...cfg, rule: 'swe-rl' }), 0, "SWE-RL's rule as released gives the no-op 0");
  assert.equal(editReward('similarity', miss, { ...cfg, rule: 'swe-rl' }), 0.91);
  for (const reason of MALFORMED_REASONS) {
    const o: EditOutcome = { malformed: reason, syntaxError: false, located: 0, swerl: -1 };
    assert.equal(editReward('similarity', o, cfg), -1, reason);
    assert.equal(editReward('similarity', o, graded), GRADED_MALFORMED[reason], reason);
    assert.ok(editReward('similarity', o, graded) < editReward('similarity', miss, graded), `${reason} below an honest miss`);
    assert.equal(editReward('tests', o, graded), GRADED_MALFORMED[reason]);
  }
  assert.equal(GRADED_MALFORMED.no_change, -1, 'graded: the no-op at the bottom, with no block');
  const broken: EditOutcome = { malformed: null, syntaxError: true, located: 0.4, swerl: 0.4 };
  assert.equal(editReward('similarity', broken, graded), -0.5);
  assert.equal(editReward('similarity', broken, cfg), 0.4, 'minus-one: a broken syntax is still a valid edit');
  const close: EditOutcome = { malformed: null, syntaxError: false, located: 0.99, swerl: 0.99 };
  assert.equal(editReward('hybrid', { ...close, resolved: false }, cfg), 0.5 * 0.99);
  assert.equal(editReward('hybrid', { ...close, resolved: true }, cfg), 1);
  assert.equal(editReward('tests', { ...close, resolved: false }, cfg), 0);
  assert.throws(() => editReward('tests', close, cfg), /needs the tests' verdict/);
});

test('localizeWeight: an edit of the faulty function earns a share of the reward; an exact fix still scores 1', async () => {
  const orig = new Map<string, string | null>([['calc/ops.py', OPS_PY]]);
  const oracle = new Map([['calc/ops.py', FIXED_OPS_PY]]);
  const pred = (text: string, more: [string, string][] = []) => new Map([['calc/ops.py', text], ...more]);
  // sub holds the fault (line 9): an edit of sub's def line hits it, an edit of add's line does not
  assert.equal(await localizedShare(orig, oracle, pred(FIXED_OPS_PY)), 1);
  assert.equal(await localizedShare(orig, oracle, pred(OPS_PY.replace('def sub(a, b):', 'def sub(a, b):  # subtract'))), 1);
  assert.equal(await localizedShare(orig, oracle, pred(OPS_PY.replace('def add(a, b):\n    return a + b', 'def add(a, b):\n    return b + a'))), 0);
  // a second file only the prediction changes halves it (as the located similarity averages files)
  assert.equal(await localizedShare(new Map([...orig, ['calc/io.py', 'x = 1\n']]), oracle, pred(FIXED_OPS_PY, [['calc/io.py', 'x = 2\n']])), 0.5);
  const cfg = EditConfigSchema.parse({ malformed: 'graded', localizeWeight: 0.2 });
  const rightFunction: EditOutcome = { malformed: null, syntaxError: false, located: 0, localized: 1, swerl: 0.3 };
  assert.equal(editReward('similarity', rightFunction, cfg), 0.2);
  assert.equal(editReward('similarity', { ...rightFunction, located: 1 }, cfg), 1, 'the exact fix');
  assert.equal(editReward('similarity', { ...rightFunction, localized: 0 }, cfg), 0, 'the wrong function: an honest miss');
  assert.equal(editReward('similarity', { ...rightFunction, syntaxError: true }, cfg), GRADED_MALFORMED.syntax_error);
  assert.equal(editReward('similarity', rightFunction, EditConfigSchema.parse({})), 0, 'off by default');
  assert.ok(!EditConfigSchema.safeParse({ localizeWeight: 0.6 }).success, 'at most 0.5: locating never pays more than fixing');
});

test('the context keeps the touched functions, numbered, within the token budget', async () => {
  const long = Array.from({ length: 60 }, (_, i) => `def f${i}(x):\n    return x + ${i}\n`).join('\n');
  const f = [{ path: 'big.py', content: long, touched: [3 * 30 + 2] }];
  const chars = (t: string) => t.length;
  const whole = await buildEditContext(f, 100_000, chars);
  assert.equal(whole.fit, 'whole');
  const cut = await buildEditContext(f, 400, chars);
  assert.equal(cut.fit, 'functions');
  assert.ok(cut.tokens <= 400, `${cut.tokens} ≤ 400`);
  assert.match(cut.text, /^```\n### big\.py\n\.\.\.\n/);
  assert.match(cut.text, / {4}91\tdef f30\(x\):\n {4}92\t {4}return x \+ 30/);
  assert.ok(!cut.text.includes('def f0('), 'far functions left out');
  const tight = await buildEditContext(f, 60, chars);
  assert.equal(tight.fit, 'lines');
  assert.match(tight.text, /92\t {4}return x \+ 30/);
});

function writeEditTaskTmp() {
  const dir = mkdtempSync(join(tmpdir(), 'edit-mode-'));
  return { ...writeEditTask(dir), dir };
}

test('an edit episode: the prompt shows the numbered oracle file, the reply becomes a git patch, SWE-RL reported beside our rule', async () => {
  const { tasksFile, dir, task } = writeEditTaskTmp();
  try {
    const run = async (reply: string, edit: object = {}) => {
      const env = await createSweEditEnvironment(task.instance_id, { tasksFile, mode: 'edit', reward: 'similarity', edit: { format: 'search_replace', ...edit } });
      try {
        const messages = await env.reset();
        const step = await env.step(reply);
        assert.equal(step.done, true);
        return { messages, ...(await env.reward('submitted')) };
      } finally {
        await env.close();
      }
    };
    const gold = await run(GOLD_REPLIES.search_replace);
    assert.match(gold.messages[1]!.content, /### calc\/ops\.py\n {5}1\t"""Small arithmetic helpers\."""/);
    assert.match(gold.messages[1]!.content, /sub\(5, 3\) returns 8/);
    // the worked example before the code, the request naming the file shown last (a small model copied an example it read last)
    const prompt = gold.messages[1]!.content;
    assert.ok(prompt.indexOf('### shapes/area.py') < prompt.indexOf('### calc/ops.py'), 'the example comes before the code');
    assert.match(prompt, /fix it in calc\/ops\.py\. Change only what the fix needs\. Do not edit test files\.$/);
    assert.equal(gold.reward, 1);
    assert.equal(gold.info!.swerlReward, 1);
    assert.equal(gold.info!.editOutcome, 'valid');
    assert.equal(gold.info!.localized, 1);
    assert.match(String(gold.info!.setting), /oracle files \(1\), whole files, \d+\/4096 tokens, numbered lines/);
    // the patch is git's, the same as the gold patch up to the index line
    const strip = (p: string) => p.replace(/^index .*\n/m, '');
    assert.equal(strip(String(gold.info!.patch)), strip(task.patch));
    // the nearby-line rewrite: add's line made into the fix scores 0 here, SWE-RL's rule pays it
    const near = await run('### calc/ops.py\n<<<<<<< SEARCH\ndef add(a, b):\n    return a + b\n=======\ndef add(a, b):\n    return a - b\n>>>>>>> REPLACE\n');
    assert.equal(near.reward, 0);
    assert.equal(near.info!.localized, 0, 'add is not the faulty function');
    // an edit of the faulty function that misses the faulty line: 0 by the located rule, localizeWeight of it located
    const inSub = '### calc/ops.py\n<<<<<<< SEARCH\ndef sub(a, b):\n=======\ndef sub(a, b):  # subtract\n>>>>>>> REPLACE\n';
    assert.deepEqual([(await run(inSub)).reward, (await run(inSub, { localizeWeight: 0.2 })).reward], [0, 0.2]);
    assert.ok(Number(near.info!.swerlReward) > 0.8, `SWE-RL's rule: ${String(near.info!.swerlReward)}`);
    const noop = await run('### calc/ops.py\n<<<<<<< SEARCH\ndef mul(a, b):\n=======\ndef mul(a, b):\n>>>>>>> REPLACE\n', { malformed: 'graded' });
    assert.equal(noop.info!.editOutcome, 'no_change');
    assert.equal(noop.reward, -1);
    assert.equal(noop.info!.patch, '');
    // without the worked example (edit.example "none"): the rules, and the lines a block starts with
    const bare = await run(GOLD_REPLIES.search_replace, { example: 'none' });
    assert.ok(!bare.messages[1]!.content.includes('shapes/area.py'), 'no example');
    assert.match(bare.messages[1]!.content, /the line ">>>>>>> REPLACE"\.\n\nBelow are parts of the files involved/);
    assert.equal(bare.reward, 1);
    assert.match(bare.messages[1]!.content, /Start your reply with these lines, then go on:\n```python\n### calc\/ops\.py\n<<<<<<< SEARCH$/);
    // a template (edit.example "template"): a block for the file shown, its lines described, nothing to copy
    const shape = await run(GOLD_REPLIES.search_replace, { example: 'template' });
    assert.match(
      shape.messages[1]!.content,
      /Write it in this shape:\n\n```python\n### calc\/ops\.py\n<<<<<<< SEARCH\nthe lines of calc\/ops\.py to change, copied exactly\n=======\n/,
    );
    assert.ok(!shape.messages[1]!.content.includes('shapes/area.py'));
    // the template's own lines copied in as the new text (Qwen2.5-Coder-0.5B learned to, on 11-29: real lines searched,
    // "the same lines with the fix" put in their place) score as low as a copy of the worked example, not as a syntax error
    const shapeLines = shape.messages[1]!.content.split('Write it in this shape:')[1]!
      .split('\n')
      .filter((l) => /^the /.test(l));
    assert.equal(shapeLines.length, 2, shapeLines.join('|'));
    for (const l of shapeLines)
      assert.ok(
        TEMPLATE_LINES.some((r) => r.test(l)),
        `a template line TEMPLATE_LINES does not know: ${l}`,
      );
    const placeholder = await run('### calc/ops.py\n<<<<<<< SEARCH\ndef sub(a, b):\n    return a + b\n=======\nthe same lines with the fix\n>>>>>>> REPLACE\n', {
      example: 'template',
      malformed: 'graded',
    });
    assert.equal(placeholder.info!.editOutcome, 'foreign_search');
    assert.equal(placeholder.reward, -1);
    // and loosely (11-29: the context copied as the search text, "..." included, then "same lines with the fix"): a
    // search text that is not found does not lift the copy to -0.75
    for (const copy of ['same lines with the fix', 'The same lines with the fix.', 'the  same lines, with fix', 'THE LINES OF calc/ops.py TO CHANGE COPIED EXACTLY'])
      for (const search of ['def sub(a, b):\n    return a + b', '...\ndef sub(a, b):\n    return a + b']) {
        const loose = await run(`### calc/ops.py\n<<<<<<< SEARCH\n${search}\n=======\n...\n${copy}\n>>>>>>> REPLACE\n`, { example: 'template', malformed: 'graded' });
        assert.equal(loose.info!.editOutcome, 'foreign_search', `${copy} under ${JSON.stringify(search)}`);
        assert.equal(loose.reward, -1);
      }
    // the lines as they are (edit.lineNumbers false): a small model copied the numbers into its search text
    const plain = await run(GOLD_REPLIES.search_replace, { lineNumbers: false });
    assert.match(plain.messages[1]!.content, /### calc\/ops\.py\n"""Small arithmetic helpers\."""/);
    assert.match(plain.messages[1]!.content, /Below are parts of the files involved; "\.\.\." stands for lines left out\./);
    assert.match(String(plain.info!.setting), /lines without numbers$/);
    assert.equal(plain.reward, 1);
    const refused = validateConfig({ env: { kind: 'swe', tasksFile, mode: 'edit', reward: 'similarity', edit: { format: 'numbered_lines', lineNumbers: false } } });
    assert.ok(!refused.ok && refused.errors.some((x) => x.startsWith('config.env.edit.lineNumbers: the numbered_lines format')), JSON.stringify(refused));
    // a block without its "### PATH" line (Qwen2.5-Coder-0.5B wrote most of its blocks so) edits the one file shown;
    // SWE-RL's rule, which needs the line, scores it malformed
    const unnamed = await run('```\n<<<<<<< SEARCH\ndef sub(a, b):\n    return a + b\n=======\ndef sub(a, b):\n    return a - b\n>>>>>>> REPLACE\n```');
    assert.equal(unnamed.info!.editOutcome, 'valid');
    assert.equal(unnamed.reward, 1);
    assert.equal(unnamed.info!.swerlReward, -1);
    // the worked example copied: a file the prompt did not show, no better than no block
    const copied = await run(
      '```python\n### shapes/area.py\n<<<<<<< SEARCH\ndef square(side):\n    return side * 2\n=======\ndef square(side):\n    return side * side\n>>>>>>> REPLACE\n```',
      { malformed: 'graded' },
    );
    assert.equal(copied.info!.editOutcome, 'missing_file');
    assert.equal(copied.reward, -1);
    // and copied into the file shown: no line of its search text is there, no better either
    const copiedHere = await run('### calc/ops.py\n<<<<<<< SEARCH\ndef square(side):\n    return side * 2\n=======\ndef square(side):\n    return side * side\n>>>>>>> REPLACE\n', {
      malformed: 'graded',
    });
    assert.equal(copiedHere.info!.editOutcome, 'foreign_search');
    assert.equal(copiedHere.reward, -1);
    const broken = await run('### calc/ops.py\n<<<<<<< SEARCH\ndef sub(a, b):\n=======\ndef sub(a, b:\n>>>>>>> REPLACE\n', { malformed: 'graded' });
    assert.equal(broken.info!.syntaxError, true);
    assert.equal(broken.reward, GRADED_MALFORMED.syntax_error);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('SWE-RL application: every occurrence replaced, a missing file read as empty', () => {
  const out = applySweRlEdits(files, [{ kind: 'search_replace', path: 'calc/ops.py', search: '    return a + b', replace: '    return a - b' }]);
  assert.equal(out?.get('calc/ops.py')?.split('return a - b').length, 3);
  assert.equal(applySweRlEdits(files, [{ kind: 'search_replace', path: 'nope.py', search: 'x', replace: 'y' }]), null);
  assert.equal(applySweRlEdits(files, [{ kind: 'search_replace', path: 'calc/ops.py', search: 'x', replace: 'x' }]), null);
});
