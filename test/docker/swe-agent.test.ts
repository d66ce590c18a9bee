// Scripted agents (no model) through SweEnvironment on the real tasks, real Docker sandboxes and real grading.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createSweEnvironment, sweEpisodeSetup, SweEnvConfigSchema, type SweEnvironment } from '../../activities/swe-env.ts';
import { validateConfig } from '../../lib/config.ts';
import type { EndReason } from '../../lib/types.ts';
import { formatToolCall } from '../../lib/toolcall.ts';
import { editsFromPatch } from '../helpers/scripted-agent.ts';
import { GRADER_VERSION } from '../../lib/swe/grading.ts';
import { NO_CALL_REMINDER, SYSTEM_PROMPT, tokenBudgetWarning } from '../../lib/swe/prompts.ts';
import { sweTasks, sweTasksFile, TASK } from '../helpers/swe-tasks.ts';
import { mulberry32 } from '../../lib/seed.ts';

const TASKS = await sweTasksFile();
const tasks = await sweTasks();
/** SWE_AGENT_TASKS=3 replays only the first three gold patches */
const replayCount = Number(process.env.SWE_AGENT_TASKS ?? tasks.length);

const finish = formatToolCall({ name: 'finish', args: { command: 'submit' } });

/** Runs a scripted episode the way the episode loop does (reset, steps until done, reward, close). */
async function scripted(env: SweEnvironment, turns: string[]): Promise<{ reward: number; info: Record<string, unknown>; end: EndReason; observations: string[] }> {
  const messages = await env.reset();
  try {
    assert.equal(messages[0]!.content, SYSTEM_PROMPT);
    assert.ok(messages[1]!.content.includes(env.task.problem_statement.trim()));
    const observations: string[] = [];
    let end: EndReason = 'max_steps';
    for (const t of turns) {
      const s = await env.step(t);
      observations.push(s.observation);
      if (s.done) {
        end = s.end ?? 'done';
        break;
      }
    }
    const r = await env.reward(end);
    return { reward: r.reward, info: r.info ?? {}, end, observations };
  } finally {
    await env.close();
  }
}

const cfg = SweEnvConfigSchema.parse({ tasksFile: TASKS });

test('config schema: defaults and field errors', () => {
  assert.equal(cfg.reward, 'tests');
  assert.equal(cfg.maxSteps, 50);
  assert.equal(cfg.evalMaxSteps, 100);
  assert.equal(cfg.commandTimeoutS, 90);
  assert.deepEqual(cfg.scratchGlobs, ['reproduce_issue.py', 'reproduce*.py']);
  const bad = SweEnvConfigSchema.safeParse({ tasksFile: TASKS, reward: 'vibes' });
  assert.ok(!bad.success && bad.error.issues[0]!.path[0] === 'reward');
});

test('rollout factory: env.kind swe from a validated training config', async () => {
  const v = validateConfig({ env: { kind: 'swe', tasksFile: TASKS, maxSteps: 7 } });
  assert.ok(v.ok);
  const { env, loop } = await sweEpisodeSetup(v.config, TASK.srcLayout, 0);
  assert.deepEqual(loop, { maxSteps: 7, stepsRemainingSuffix: true, tokenWarningAt: 2048, tokenWarning: tokenBudgetWarning });
  await env.close();
  await assert.rejects(sweEpisodeSetup(v.config, 'no-such-task', 0), /not in/);
});

for (const task of tasks.slice(0, replayCount)) {
  test(`gold patch replayed through file_editor → reward 1: ${task.instance_id}`, async () => {
    const env = await createSweEnvironment(task.instance_id, cfg);
    const edits = editsFromPatch(task.patch);
    const scratch = formatToolCall({ name: 'file_editor', args: { command: 'create', path: '/testbed/reproduce_issue.py', file_text: 'print("scratch")' } });
    const r = await scripted(env, [scratch, ...edits, finish]);
    for (const o of r.observations.slice(0, -1)) assert.doesNotMatch(o, /^ERROR/, o);
    assert.equal(r.end, 'submitted');
    assert.equal(r.info.reason, 'passed', JSON.stringify({ reason: r.info.reason, detail: r.info.detail, patch: r.info.patch }).slice(0, 2000));
    assert.equal(r.reward, 1);
    assert.equal(r.info.graderVersion, GRADER_VERSION);
    assert.doesNotMatch(String(r.info.patch), /reproduce_issue\.py/);
    for (const id of task.FAIL_TO_PASS) assert.equal((r.info.tests as { FAIL_TO_PASS: Record<string, string> }).FAIL_TO_PASS[id], 'PASSED');
  });
}

test('submitting nothing → 0; a no-call reply gets the reminder and the step counts', async () => {
  const env = await createSweEnvironment(TASK.sdist, cfg);
  const r = await scripted(env, ['I am not sure what to do.', finish]);
  assert.equal(r.observations[0], NO_CALL_REMINDER);
  assert.equal(r.end, 'submitted');
  assert.equal(r.reward, 0);
  assert.equal(r.info.reason, 'empty_patch');
  assert.equal(r.info.graderVersion, GRADER_VERSION);
  assert.equal(r.info.steps, 2);
});

test('editing the test file so the failing test passes trivially → 0 (grading restores the tests)', async () => {
  const id = TASK.sdist;
  const f2p = tasks.find((t) => t.instance_id === id)!.FAIL_TO_PASS[0]!;
  const env = await createSweEnvironment(id, cfg);
  const cheat = formatToolCall({
    name: 'execute_bash',
    args: {
      cmd: "printf '\\n\\ndef test_interpose_empty_and_single():\\n    pass\\n' >> toolz/tests/test_itertoolz.py && python3 -m pytest -q -p no:cacheprovider toolz/tests/test_itertoolz.py -k test_interpose_empty_and_single",
    },
  });
  const r = await scripted(env, [cheat, finish]);
  assert.match(r.observations[0]!, /1 passed/);
  assert.match(String(r.info.patch), /toolz\/tests\/test_itertoolz\.py/);
  assert.equal(r.reward, 0);
  assert.equal(r.info.reason, 'tests_failed');
  assert.equal((r.info.tests as { FAIL_TO_PASS: Record<string, string> }).FAIL_TO_PASS[f2p], 'FAILED');
});

test('similarity reward option: gold replay → 1, nothing → −1', async () => {
  const task = tasks.find((t) => t.instance_id === TASK.rootModule)!;
  const sim = SweEnvConfigSchema.parse({ tasksFile: TASKS, reward: 'similarity' });
  const r = await scripted(await createSweEnvironment(task.instance_id, sim), [...editsFromPatch(task.patch), finish]);
  assert.equal(r.reward, 1);
  const none = await scripted(await createSweEnvironment(task.instance_id, sim), [finish]);
  assert.equal(none.reward, -1);
  assert.equal(none.info.reason, 'empty_patch');
});

const rng = mulberry32;

test('fuzz: a few hundred random and adversarial replies through a real env step never throw', async () => {
  const r = rng(11);
  const pieces = [
    '<function=',
    '<function=file_editor>',
    '<function=search>',
    '<function=execute_bash>',
    '</function>',
    '<parameter=',
    '<parameter=command>',
    '<parameter=path>',
    '<parameter=search_term>',
    '<parameter=view_range>',
    '</parameter>',
    'view',
    'insert',
    'undo_edit',
    '/testbed',
    '/etc',
    '..',
    '[1, -1]',
    '[9999, 1]',
    'x',
    '\n',
    '日本',
    '\u0000',
    '\uD800',
    '>',
    '<',
    '<function=finish>',
  ];
  const texts: string[] = [];
  for (let k = 0; k < 300; k++) {
    if (k % 3 === 0) texts.push(Array.from({ length: Math.floor(r() * 120) }, () => String.fromCharCode(Math.floor(r() * 0x10000))).join(''));
    else texts.push(Array.from({ length: Math.floor(r() * 24) }, () => pieces[Math.floor(r() * pieces.length)]).join(''));
  }
  texts.push(`<function=execute_bash><parameter=cmd>echo ${'z'.repeat(300_000)}</parameter></function>`, '<function=file_editor>'.repeat(1000));
  const env = await createSweEnvironment(TASK.sdist, cfg);
  await env.reset();
  try {
    let errors = 0;
    for (const t of texts) {
      const s = await env.step(t);
      assert.equal(typeof s.observation, 'string');
      assert.ok(s.end === undefined || s.end === 'submitted', `${JSON.stringify(t).slice(0, 200)} → ${s.end}: ${s.observation.slice(0, 200)}`);
      if (s.observation.startsWith('ERROR')) errors++;
    }
    assert.ok(errors > 0);
    // the sandbox is still usable afterwards
    assert.match((await env.step(formatToolCall({ name: 'execute_bash', args: { cmd: 'echo still-here' } }))).observation, /still-here/);
  } finally {
    await env.close();
  }
});
