// The four R2E-Gym tools in a real Docker sandbox of a task image (one container for the whole file): a real
// release (toolz 1.1.0 from PyPI), for its package of modules over 150 lines and its tests inside the package.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Sandbox } from '../../lib/sandbox.ts';
import type { SweTask } from '../../lib/swe/task.ts';
import { SweTools, MAX_OBSERVATION_CHARS } from '../../lib/swe/tools.ts';
import { parseToolCall } from '../../lib/toolcall.ts';
import { SWE_TOOL_ALIASES, SWE_TOOL_SCHEMAS } from '../../lib/swe/tools.ts';
import { DockerBackend } from '../../activities/sandbox/docker.ts';
import { ensureTaskImage, taskImageName } from '../../activities/images.ts';
import { sweTask, TASK } from '../helpers/swe-tasks.ts';

let sandbox: Sandbox;
let tools: SweTools;
let task: SweTask;

before(async () => {
  task = await sweTask(TASK.sdist);
  await ensureTaskImage(task);
  sandbox = await new DockerBackend().start(await taskImageName(task), {}, { 'swerl.test': 'tools' });
  tools = new SweTools(sandbox);
});

after(async () => {
  await sandbox?.stop();
});

/** Runs a call given as text, the way the environment does. */
async function call(text: string, t: SweTools = tools) {
  const p = parseToolCall(text, { tools: SWE_TOOL_SCHEMAS, aliases: SWE_TOOL_ALIASES });
  assert.ok(p.ok, p.ok ? '' : p.error);
  return t.run(p.call);
}
const fe = (params: Record<string, string>) =>
  call(
    `<function=file_editor>\n${Object.entries(params)
      .map(([k, v]) => `<parameter=${k}>${v}</parameter>`)
      .join('\n')}\n</function>`,
  ).then((r) => r.observation);
const bash = (cmd: string) => call(`<function=execute_bash><parameter=cmd>${cmd}</parameter></function>`);
const cat = async (p: string) => (await sandbox.exec(`cat ${p}`, 30)).stdout;

test('view: whole file, ranges with -1, and range errors', async () => {
  const lines = (await cat('/testbed/toolz/utils.py')).split('\n').length - 1;
  const all = await fe({ command: 'view', path: '/testbed/toolz/utils.py' });
  assert.match(all, /^Here's the result of running `cat -n`/);
  assert.match(all, /\n {5}1\t/);
  const r = await fe({ command: 'view', path: 'toolz/utils.py', view_range: '[2, 3]' });
  assert.match(r, /\n {5}2\t.*\n {5}3\t/);
  assert.doesNotMatch(r, /\n {5}4\t/);
  const tail = await fe({ command: 'view', path: '/testbed/toolz/utils.py', view_range: `[${lines}, -1]` });
  assert.match(tail, new RegExp(`\\n +${lines}\\t`));
  assert.match(await fe({ command: 'view', path: '/testbed/toolz/utils.py', view_range: '[0, 3]' }), /^ERROR: Invalid `view_range`/);
  assert.match(await fe({ command: 'view', path: '/testbed/toolz/utils.py', view_range: `[1, ${lines + 1}]` }), /should not be greater than the number of lines/);
  assert.match(await fe({ command: 'view', path: '/testbed/toolz/utils.py', view_range: '[5, 3]' }), /^ERROR/);
  assert.match(await fe({ command: 'view', path: '/testbed/nope.py' }), /does not exist/);
  assert.match(await fe({ command: 'view', path: '/etc/passwd' }), /outside the repository/);
  assert.match(await fe({ command: 'view', path: '/testbed/../etc/passwd' }), /outside the repository/);
});

test('view: a .py file over 150 lines is condensed (R2E-Gym), unless view_range or concise=false asks for the lines', async () => {
  const p = '/testbed/toolz/itertoolz.py';
  const full = (await cat(p)).split('\n');
  const groupby = full.findIndex((l) => l.startsWith('def groupby(')) + 1;
  const c = await fe({ command: 'view', path: p });
  assert.match(c, /^Here is a condensed view of \/testbed\/toolz\/itertoolz\.py: function bodies over 3 lines/);
  assert.ok(
    c.includes(`\n${String(groupby).padStart(6)}\tdef groupby(key, seq):\n${String(groupby + 1).padStart(6)}\t... eliding lines ${groupby + 1}-`),
    'signature at its own line number, body elided',
  );
  assert.doesNotMatch(c, /response clipped/); // the whole outline fits where the whole file would not
  const lines = await fe({ command: 'view', path: p, view_range: `[${groupby}, ${groupby + 3}]` });
  assert.match(lines, /^Here's the result of running `cat -n`/);
  assert.ok(lines.includes(`${String(groupby + 3).padStart(6)}\t${full[groupby + 2]}`));
  const whole = await fe({ command: 'view', path: p, concise: 'false' });
  assert.match(whole, /^Here's the result of running `cat -n`[^]*response clipped/);
  const small = await fe({ command: 'view', path: '/testbed/toolz/utils.py', concise: 'true' });
  assert.match(small, /^Here is a condensed view[^]*\n {5}2\t\.\.\. eliding lines 2-6 \.\.\.\n/);
  // an edit that breaks the syntax: the file is shown as it is
  await sandbox.exec(`cp ${p} /tmp/itertoolz.bak && printf 'def broken(:\\n' >> ${p}`, 30);
  try {
    assert.match(await fe({ command: 'view', path: p }), /^Here's the result of running `cat -n`/);
  } finally {
    await sandbox.exec(`cp /tmp/itertoolz.bak ${p}`, 30);
  }
});

test('view: a directory lists two levels, hidden entries excluded', async () => {
  const d = await fe({ command: 'view', path: '/testbed' });
  assert.match(d, /\n\/testbed\/toolz\n/);
  assert.match(d, /\n\/testbed\/toolz\/itertoolz\.py\n/);
  assert.doesNotMatch(d, /\/testbed\/toolz\/tests\/test_itertoolz\.py/); // third level
  assert.doesNotMatch(d, /\/testbed\/\.git/);
});

test('create, str_replace (0 / 1 / many), insert bounds, undo', async () => {
  const p = '/testbed/scratch/demo.py';
  assert.match(await fe({ command: 'create', path: p, file_text: 'a = 1\nb = 2\na = 1\n' }), /File created successfully/);
  assert.equal(await cat(p), 'a = 1\nb = 2\na = 1\n');
  assert.match(await fe({ command: 'create', path: p, file_text: 'x' }), /already exists/);
  assert.match(await fe({ command: 'create', path: '/tmp/x.py', file_text: 'x' }), /outside the repository/);

  assert.match(await fe({ command: 'str_replace', path: p, old_str: 'c = 3', new_str: 'd' }), /did not appear verbatim/);
  assert.match(await fe({ command: 'str_replace', path: p, old_str: 'a = 1', new_str: 'd' }), /occurs 2 times .* at lines 1, 3/);
  const ok = await fe({ command: 'str_replace', path: p, old_str: 'b = 2', new_str: 'b = 20\nc = 3' });
  assert.match(ok, /has been edited/);
  assert.match(ok, / {5}2\tb = 20\n {5}3\tc = 3/);
  assert.equal(await cat(p), 'a = 1\nb = 20\nc = 3\na = 1\n');

  assert.match(await fe({ command: 'insert', path: p, insert_line: '0', new_str: '# top' }), /has been edited/);
  assert.match(await fe({ command: 'insert', path: p, insert_line: '5', new_str: '# end' }), /has been edited/);
  assert.equal(await cat(p), '# top\na = 1\nb = 20\nc = 3\na = 1\n# end\n');
  assert.match(await fe({ command: 'insert', path: p, insert_line: '7', new_str: 'x' }), /Invalid `insert_line` 7.*\[0, 6\]/);
  assert.match(await fe({ command: 'insert', path: p, insert_line: '-1', new_str: 'x' }), /Invalid `insert_line`/);

  // undo walks back through the history, then the create itself, then reports none
  for (const expected of ['# top\na = 1\nb = 20\nc = 3\na = 1\n', 'a = 1\nb = 20\nc = 3\na = 1\n', 'a = 1\nb = 2\na = 1\n']) {
    assert.match(await fe({ command: 'undo_edit', path: p }), /undone/);
    assert.equal(await cat(p), expected);
  }
  assert.match(await fe({ command: 'undo_edit', path: p }), /removed/);
  assert.equal((await sandbox.exec(`test -e ${p}`, 10)).exit, 1);
  assert.match(await fe({ command: 'undo_edit', path: p }), /No edit history/);
  assert.match(await fe({ command: 'undo_edit', path: '/testbed/setup.py' }), /No edit history/);
  assert.match(await fe({ command: 'str_replace', path: '/testbed/toolz', old_str: 'x', new_str: 'y' }), /is a directory/);
});

test('output is clipped at 10,000 characters with a note; long command output keeps first and last 40 lines', async () => {
  await sandbox.exec(`python3 -c "open('/testbed/big.txt','w').write(''.join('line %05d %s\\n' % (i, 'x'*50) for i in range(1000)))"`, 30);
  const v = await fe({ command: 'view', path: '/testbed/big.txt' });
  assert.ok(v.length < MAX_OBSERVATION_CHARS + 300, String(v.length));
  assert.match(v, /<response clipped: \d+ more characters not shown; use `view_range`/);

  const seq = (await bash('seq 1 1000')).observation;
  assert.match(seq, /^\[STDOUT\]\n1\n2\n/);
  assert.match(seq, /<\.\.\. 920 lines omitted \.\.\.>/);
  assert.match(seq, /\n40\n<\.\.\./);
  assert.match(seq, /\.\.\.>\n961\n/);
  assert.match(seq, /\n1000\n\[STDERR\]\n$/);
  const wide = (await bash(`python3 -c "print('y' * 30000)"`)).observation;
  assert.ok(wide.length <= MAX_OBSERVATION_CHARS + 300, String(wide.length));
  assert.match(wide, /response clipped/);
});

test('execute_bash: streams, exit code, blocked first words', async () => {
  const r = await bash('echo out; echo err >&2; exit 3');
  assert.equal(r.observation, '[STDOUT]\nout\n[STDERR]\nerr\n[EXIT CODE] 3');
  assert.equal(r.end, undefined);
  assert.equal((await bash('pwd')).observation, '[STDOUT]\n/testbed\n[STDERR]\n');
  for (const cmd of ['git status', 'ipython', 'jupyter notebook', 'nohup sleep 5 &', 'GIT_PAGER=cat git log', '/usr/bin/git diff', '  git\tdiff']) {
    assert.match((await bash(cmd)).observation, /^ERROR: The command `\w+` is not allowed/, cmd);
  }
  assert.equal((await bash('echo git')).observation, '[STDOUT]\ngit\n[STDERR]\n');
});

test('execute_bash: a command past its limit is killed and the sandbox stays usable; past the episode deadline → env_timeout', async () => {
  const short = new SweTools(sandbox, { commandTimeoutS: 2 });
  const t0 = Date.now();
  const r = await call('<function=execute_bash><parameter=cmd>sleep 1000</parameter></function>', short);
  const took = Date.now() - t0;
  assert.ok(took < 15_000, `took ${took} ms`);
  assert.match(r.observation, /took longer than 2 seconds/);
  assert.equal(r.end, undefined);
  assert.equal(
    (
      await call(
        "<function=execute_bash><parameter=cmd>echo alive; cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c 'sleep 100[0]' || true</parameter></function>",
        short,
      )
    ).observation,
    '[STDOUT]\nalive\n0\n[STDERR]\n',
  );

  const ending = new SweTools(sandbox, { commandTimeoutS: 90, deadlineMs: Date.now() + 3000 });
  const e = await call('<function=execute_bash><parameter=cmd>sleep 1000</parameter></function>', ending);
  assert.equal(e.end, 'env_timeout');
  const over = new SweTools(sandbox, { deadlineMs: Date.now() - 1 });
  assert.equal((await call('<function=execute_bash><parameter=cmd>echo hi</parameter></function>', over)).end, 'env_timeout');
});

test('search: in a file, in a directory, none, more than 100 files', async () => {
  const f = (await call('<function=search><parameter=search_term>def partition_all</parameter><parameter=path>/testbed/toolz/itertoolz.py</parameter></function>')).observation;
  assert.match(f, /^Matches for "def partition_all" in \/testbed\/toolz\/itertoolz\.py:\n\d+:def partition_all/);
  const d = (await call('<function=search><parameter=search_term>partition_all</parameter></function>')).observation;
  assert.match(d, /^Found \d+ matches for "partition_all" in \/testbed:\n/);
  assert.match(d, /\.\/toolz\/itertoolz\.py \(\d+ matches\)/);
  assert.doesNotMatch(d, /\.git\//);
  assert.match(
    (await call('<function=search><parameter=search_term>zzz_no_such_text_zzz</parameter><parameter=path>/testbed/toolz</parameter></function>')).observation,
    /^No matches found/,
  );
  await sandbox.exec('mkdir -p /testbed/many && for i in $(seq 1 120); do echo needle_xyz > many/f$i.txt; done', 30);
  assert.match(
    (await call('<function=search><parameter=search_term>needle_xyz</parameter><parameter=path>/testbed</parameter></function>')).observation,
    /More than 100 files matched .*narrow/,
  );
  assert.match((await call('<function=search><parameter=search_term>x</parameter><parameter=path>/etc</parameter></function>')).observation, /outside the repository/);
  assert.match((await call('<function=search><parameter=search_term>x</parameter><parameter=path>/testbed/missing</parameter></function>')).observation, /does not exist/);
});

test('finish ends the episode as submitted', async () => {
  const r = await call('<function=finish><parameter=command>submit</parameter></function>');
  assert.equal(r.end, 'submitted');
});
