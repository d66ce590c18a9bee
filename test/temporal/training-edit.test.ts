// One training iteration in edit mode (SWE-RL's single turn) through the real workflows, worker, policy server and
// native learner, on a task of our own read from its source tarball (no container: a similarity reward). The tiny
// preset's own replies are noise; half of the group's replies are the gold edit, played through the server, so the
// group's rewards differ and the learner takes a real step.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { train } from '../../scripts/commands/train.ts';
import { keys, listCheckpoints, openStore } from '../../lib/store.ts';
import { loadTokenizer } from '../../lib/tokenizer.ts';
import type { Trajectory } from '../../lib/types.ts';
import type { LearnerHandle } from '../../activities/learner.ts';
import { startWorkers, type RunningWorkers } from '../../workers/index.ts';
import { startTestTemporal, tinySweConfig, type TestTemporal } from '../helpers/temporal.ts';
import { GOLD_REPLIES, writeEditTask } from '../helpers/edit-task.ts';

let t: TestTemporal;
let workers: RunningWorkers;
let tasksFile: string;
let scripted = 0;

/** The learner as the worker loads it, its server answering every other edit prompt with the gold reply. */
async function halfGold(dir: string, o: { device: 'cpu' | 'cuda'; threads?: number }): Promise<LearnerHandle> {
  const { Learner } = await import('../../gpu-learner/index.ts');
  const real = await Learner.load(dir, o);
  const tok = await loadTokenizer(dir);
  return {
    config: real.config,
    logprobs: (b) => real.logprobs(b),
    trainStep: (b, hp) => real.trainStep(b, hp),
    save: (d) => real.save(d),
    close: () => real.close(),
    async generate(promptIds, opts) {
      const prompt = tok.decode(Array.from(promptIds), { skipSpecial: false });
      if (!prompt.includes('Here is an issue reported against a Python repository') || scripted++ % 2 === 1) return real.generate(promptIds, opts);
      const ids = Int32Array.from([...tok.encode(GOLD_REPLIES.search_replace), tok.imEnd]);
      // the behaviour log-probs are the model's own, as if it had sampled the reply
      const all = Int32Array.from([...promptIds, ...ids]);
      const logprobs = (await real.logprobs({ ids: all, offsets: Int32Array.from([0, all.length]) })).slice(promptIds.length);
      // the server asks for the top alternatives of each token: the reply's own token stands for them
      const k = opts.topLogprobs ?? 0;
      const top =
        k > 0
          ? {
              topIds: Int32Array.from({ length: ids.length * k }, (_, i) => ids[Math.floor(i / k)]!),
              topLogprobs: Float32Array.from({ length: ids.length * k }, (_, i) => logprobs[Math.floor(i / k)]!),
            }
          : {};
      return { ids, logprobs, finishReason: 'stop' as const, ...top };
    },
  };
}

before(async () => {
  t = await startTestTemporal('swerl-edit-');
  tasksFile = writeEditTask(t.dir).tasksFile;
  workers = await startWorkers({ address: t.server.address, queues: ['learner', 'rollout'], workflowBundle: t.bundle, learner: { threads: 1, loadLearner: halfGold } });
});
after(async () => {
  await workers?.shutdown();
  await t?.close();
});

test('an edit-mode iteration: one-turn episodes scored by similarity, SWE-RL reported, a learner step on unequal rewards', async () => {
  const config = tinySweConfig(t.dir, tasksFile, {
    batch: { tasks: 1, samples: 4 },
    maxInflightRollouts: 4,
    episode: { maxSteps: 1, responseBudget: 96, maxTokensPerTurn: 96, temperature: 1, topP: 1, timeoutMinutes: 5 },
    algorithm: { lr: 1e-3, lMax: 96 },
    env: { kind: 'swe', tasksFile, mode: 'edit', reward: 'similarity', edit: { format: 'search_replace', contextTokens: 1024, malformed: 'graded' } },
  });
  const configPath = join(t.dir, 'edit.json');
  writeFileSync(configPath, JSON.stringify(config));
  const o = await train({ config: configPath, out: join(t.dir, 'out'), address: t.server.address, runId: 'edit-run', quiet: true });
  assert.equal(o.result.checkpoint, 1);

  const store = openStore(config.store.url);
  const trajs = await Promise.all((await store.list(keys.trajectories('edit-run', 0))).map(async (k) => (await store.getJson<Trajectory>(k))!));
  assert.equal(trajs.length, 4);
  const tok = await loadTokenizer(store.dirFor(keys.checkpoint('edit-run', 0)));
  for (const tr of trajs) {
    const info = tr.info as Record<string, unknown>;
    assert.equal(tr.steps, 1, 'one turn');
    assert.equal(tr.end, 'submitted');
    assert.equal(info.mode, 'edit');
    assert.equal(info.format, 'search_replace');
    assert.match(String(info.setting), /^oracle files \(1\), whole files, \d+\/1024 tokens, numbered lines$/);
    const prompt = tok.decode(tr.ids.slice(0, tr.promptLength), { skipSpecial: false });
    assert.match(prompt, /### calc\/ops\.py\n {5}1\t"""Small arithmetic helpers\."""/);
    if (info.editOutcome === 'valid') {
      assert.equal(tr.reward, 1, 'the gold edit');
      assert.equal(info.swerlReward, 1);
    } else {
      // the untrained model's noise: no block, scored at the bottom of the graded scale; SWE-RL's rule gives −1 too
      assert.equal(info.editOutcome, 'no_block');
      assert.equal(tr.reward, -1);
      assert.equal(info.swerlReward, -1);
    }
  }
  assert.deepEqual(trajs.map((x) => x.reward).sort(), [-1, -1, 1, 1]);
  assert.equal(o.metrics[0]!.meanReward, 0);
  const step = (await store.getJson<{ sequences: number; skipped: boolean }>(keys.checkpointStats('edit-run', 1)))!;
  assert.equal(step.skipped, false);
  assert.equal(step.sequences, 4, 'every episode trained: the group has unequal rewards');
  assert.deepEqual(await listCheckpoints(store, 'edit-run'), [0, 1]);
  const w = (n: number) => readFileSync(join(store.dirFor(keys.checkpoint('edit-run', n)), 'model.safetensors'));
  assert.notDeepEqual(w(1), w(0), 'the weights moved');
});
