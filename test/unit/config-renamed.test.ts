// Training and evaluation name the same episode limits alike (responseBudget, maxTokensPerTurn); the old name
// `contextBudget` is refused with the new one named, except in recorded configs (stored, or a workflow's input).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { validateConfig, withRenamedFields, TRAINING_RENAMED, type TrainingConfig } from '../../lib/config.ts';
import { validateEvalConfig, validationEvalConfig } from '../../lib/eval/config.ts';

const evalBase = { tasksFile: 'tasks.jsonl', model: { run: 'r', checkpoint: 'latest' } };

test('a config with the old name contextBudget fails with one error naming the field and responseBudget', () => {
  const ev = validateEvalConfig({ ...evalBase, contextBudget: 4096 });
  assert.ok(!ev.ok);
  assert.deepEqual(ev.errors, ['config.contextBudget: renamed: use responseBudget']);
  const tr = validateConfig({ eval: { every: 1, tasks: 'held-out.jsonl', contextBudget: 64 } });
  assert.ok(!tr.ok);
  assert.deepEqual(tr.errors, ['config.eval.contextBudget: renamed: use responseBudget']);
  // beside other mistakes, each is still reported
  const both = validateEvalConfig({ ...evalBase, contextBudget: 1, maxSteps: 0 });
  assert.ok(
    !both.ok && both.errors.includes('config.contextBudget: renamed: use responseBudget') && both.errors.some((e) => e.startsWith('config.maxSteps:')),
    JSON.stringify(both),
  );
});

test('the new name validates; the same defaults in both configs, the response budget twice as large in evaluation', () => {
  const ev = validateEvalConfig({ ...evalBase, responseBudget: 4096 });
  assert.ok(ev.ok && ev.config.responseBudget === 4096);
  const evDefault = validateEvalConfig(evalBase);
  const trDefault = validateConfig({});
  assert.ok(evDefault.ok && trDefault.ok);
  assert.equal(evDefault.config.maxTokensPerTurn, 8192);
  assert.equal(trDefault.config.episode.maxTokensPerTurn, evDefault.config.maxTokensPerTurn);
  assert.deepEqual([trDefault.config.episode.responseBudget, evDefault.config.responseBudget], [32_768, 65_536]);
  const tr = validateConfig({ eval: { every: 1, tasks: 'held-out.jsonl', responseBudget: 64 } });
  assert.ok(tr.ok && tr.config.eval?.responseBudget === 64);
});

test('recorded configs (written before the rename) are read under the new name; the new name wins when both are there', () => {
  const ev = validateEvalConfig({ ...evalBase, contextBudget: 4096 }, { recorded: true });
  assert.ok(ev.ok && ev.config.responseBudget === 4096, JSON.stringify(ev));
  assert.ok(!('contextBudget' in (ev.ok ? ev.config : {})));
  const tr = validateConfig({ eval: { every: 1, tasks: 'held-out.jsonl', contextBudget: 64 } }, { recorded: true });
  assert.ok(tr.ok && tr.config.eval?.responseBudget === 64, JSON.stringify(tr));
  const raw = { eval: { every: 1, tasks: 't', contextBudget: 1, responseBudget: 2 }, seed: 3 };
  assert.deepEqual(withRenamedFields(raw, TRAINING_RENAMED), { eval: { every: 1, tasks: 't', responseBudget: 2 }, seed: 3 });
  assert.equal(raw.eval.contextBudget, 1, 'the input is not changed');
  assert.deepEqual(withRenamedFields({ seed: 3 }, TRAINING_RENAMED), { seed: 3 });
  assert.equal(withRenamedFields(null, TRAINING_RENAMED), null);
});

test("a training run's validation evaluation takes eval.responseBudget, and a run started before the rename its contextBudget", () => {
  const v = validateConfig({ eval: { every: 1, tasks: 'held-out.jsonl', responseBudget: 64 } });
  assert.ok(v.ok);
  const child = validationEvalConfig(v.config, 'run', 3);
  assert.equal(child.responseBudget, 64);
  assert.equal(child.maxTokensPerTurn, v.config.episode.maxTokensPerTurn);
  assert.ok(validateEvalConfig(child).ok, 'the child config validates as a user-given one');
  // the workflow input of an rlIteration started before the rename (its trainingRun validated the old schema)
  const old = { ...v.config, eval: { every: 1, tasks: 'held-out.jsonl', runs: 1, contextBudget: 48 } } as unknown as TrainingConfig;
  assert.equal(validationEvalConfig(old, 'run', 3).responseBudget, 48);
});
