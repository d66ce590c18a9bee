// The config schema's error messages and the artifact store's atomic writes and key layout (no server needed).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { applyHyperparameters, validateConfig, validateHyperparametersUpdate } from '../../lib/config.ts';
import { FileStore, fileStoreUrl, keys, listCheckpoints } from '../../lib/store.ts';

test('defaults are DeepSWE settings', () => {
  const v = validateConfig({});
  assert.ok(v.ok);
  const c = v.config;
  assert.deepEqual(c.batch, { tasks: 64, samples: 8 });
  assert.equal(c.algorithm.lr, 1e-6);
  assert.equal(c.algorithm.clipLow, 0.2);
  assert.equal(c.algorithm.clipHigh, 0.28);
  assert.equal(c.algorithm.lMax, 32768);
  assert.equal(c.episode.maxSteps, 50);
  assert.equal(c.episode.responseBudget, 32768);
  assert.equal(c.rollout.startToCloseMinutes, 20);
  assert.equal(c.env.kind, 'frozenlake');
  assert.ok(validateConfig(JSON.parse(readFileSync(new URL('../../configs/frozenlake.json', import.meta.url), 'utf8'))).ok);
  // issue 29's recipe (bench/learning.ts sets its model and tasks): edit mode, similarity reward
  const swerl = validateConfig(JSON.parse(readFileSync(new URL('../../configs/swe-rl.json', import.meta.url), 'utf8')));
  assert.ok(swerl.ok && swerl.config.env.kind === 'swe' && swerl.config.env.mode === 'edit' && swerl.config.env.reward === 'similarity', JSON.stringify(swerl));
});

test('invalid configs name the path and the value', () => {
  const v = validateConfig({ batch: { tasks: 1000 }, algorithm: { loss: 'ppo', lr: 0 }, env: { kind: 'atari' }, extra: 1 });
  assert.ok(!v.ok);
  assert.ok(v.errors.includes('config.batch.tasks: must be ≤ 512, got 1000'), v.errors.join('\n'));
  assert.ok(v.errors.includes('config.algorithm.loss: must be one of "grpo++", "grpo", got "ppo"'));
  assert.ok(v.errors.includes('config.algorithm.lr: must be > 0, got 0'));
  assert.ok(v.errors.some((e) => e.startsWith('config.env.kind:') && e.includes('"atari"')));
  assert.ok(v.errors.includes('config: unknown field(s) extra'));
  const swe = validateConfig({ env: { kind: 'swe' } });
  assert.ok(!swe.ok && swe.errors[0].startsWith('config.env.tasksFile:'));
});

test('hyperparameter updates are validated and applied', () => {
  const bad = validateHyperparametersUpdate({ lr: -1, bogus: 2 });
  assert.ok(!bad.ok && bad.errors.some((e) => e === 'hyperparameters.lr: must be > 0, got -1'));
  const good = validateHyperparametersUpdate({ lr: 1e-4, temperature: 0.7 });
  assert.ok(good.ok);
  const v = validateConfig({});
  assert.ok(v.ok);
  const c = applyHyperparameters(v.config, good.update);
  assert.equal(c.algorithm.lr, 1e-4);
  assert.equal(c.episode.temperature, 0.7);
  assert.equal(c.algorithm.clipHigh, 0.28);
});

test('the file store writes atomically at derived keys; directories exist only when complete', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'swerl-store-'));
  try {
    const store = new FileStore(fileStoreUrl(dir));
    assert.equal(keys.trajectory('r1', 3, 'fl-42', 5), 'runs/r1/iter-3/traj/fl-42/5.json');
    assert.equal(keys.trajectory('r1', 0, 'django/django#1', 0), 'runs/r1/iter-0/traj/django~2fdjango~231/0.json');
    await store.putJson(keys.trajectory('r1', 0, 'a', 1), { x: 1 });
    assert.deepEqual(await store.getJson(keys.trajectory('r1', 0, 'a', 1)), { x: 1 });
    assert.equal(await store.getJson('runs/r1/missing.json'), null);
    assert.deepEqual(await store.list(keys.trajectories('r1', 0)), ['runs/r1/iter-0/traj/a/1.json']);

    await assert.rejects(
      store.putDir(keys.checkpoint('r1', 1), async (tmp) => {
        await import('node:fs/promises').then((fs) => fs.writeFile(join(tmp, 'model.safetensors'), 'partial'));
        throw new Error('crash mid-save');
      }),
      /crash mid-save/,
    );
    assert.equal(await store.exists(keys.checkpoint('r1', 1)), false, 'no partial checkpoint');
    assert.deepEqual(readdirSync(store.dirFor(keys.checkpoints('r1'))), [], 'temp dir cleaned');
    for (const n of [0, 1, 2]) {
      assert.equal(await store.putDir(keys.checkpoint('r1', n), async (tmp) => import('node:fs/promises').then((fs) => fs.writeFile(join(tmp, 'stats.json'), `{"n":${n}}`))), true);
    }
    assert.equal(await store.putDir(keys.checkpoint('r1', 2), async () => assert.fail('must not rebuild an existing checkpoint')), false);
    assert.deepEqual(await listCheckpoints(store, 'r1'), [0, 1, 2]);
    assert.throws(() => store.dirFor('../escape'), /plain segments/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a writer SIGKILLed inside putDir leaves a temp directory that the next putDir on this host removes', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'swerl-store-'));
  try {
    const url = fileStoreUrl(dir);
    // a real process writing checkpoint 1 of run r1, killed before its rename: what a learner crash while saving leaves
    const writer = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        '--input-type=module',
        '-e',
        `import { FileStore } from ${JSON.stringify(join(process.cwd(), 'lib/store.ts'))};
         import { writeFileSync } from 'node:fs';
         await new FileStore(${JSON.stringify(url)}).putDir('runs/r1/ckpt/1', async (tmp) => {
           writeFileSync(tmp + '/model.safetensors', Buffer.alloc(1 << 20));
           console.log('writing');
           await new Promise(() => setInterval(() => {}, 1000));
         });`,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    await new Promise<void>((ok, fail) => {
      writer.stdout!.on('data', (b: Buffer) => b.toString().includes('writing') && ok());
      writer.on('exit', (code) => fail(new Error(`writer exited ${code} before writing`)));
    });
    writer.kill('SIGKILL');
    await once(writer, 'exit');
    const store = new FileStore(url);
    const ckpts = store.dirFor(keys.checkpoints('r1'));
    const left = readdirSync(ckpts);
    assert.equal(left.length, 1);
    assert.match(left[0]!, new RegExp(`^1\\.tmp-[^/]+-${writer.pid}-[0-9a-f]{8}$`));
    // entries that must stay: a live writer on this host (our parent), a writer on another host, the old name form
    const keep = [`1.tmp-${left[0]!.split('-').slice(1, -2).join('-')}-${process.ppid}-00000000`, '1.tmp-other-host-1-00000000', `1.tmp-${writer.pid}-00000000`];
    for (const k of keep) mkdirSync(join(ckpts, k));
    // the retried step finds its temp directory gone and writes checkpoint 1 whole
    assert.equal(await store.putDir(keys.checkpoint('r1', 1), async (tmp) => writeFileSync(join(tmp, 'stats.json'), '{}')), true);
    assert.deepEqual(readdirSync(ckpts).sort(), ['1', ...keep].sort());
    assert.deepEqual(readdirSync(join(ckpts, '1')), ['stats.json']);
    assert.deepEqual(await listCheckpoints(store, 'r1'), [1]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the embedded worker of a synchronous run keeps one checkpoint in its policy server; an asynchronous one the default cache', async () => {
  const { embeddedLearnerOptions } = await import('../../scripts/commands/train.ts');
  const sync = validateConfig({});
  const onestep = validateConfig({ async: { mode: 'one-step' } });
  assert.ok(sync.ok && onestep.ok, JSON.stringify([sync, onestep]));
  assert.equal(embeddedLearnerOptions(sync.config).policyModels, 1);
  assert.equal(embeddedLearnerOptions(onestep.config).policyModels, undefined);
  assert.equal(embeddedLearnerOptions(sync.config, 1).threads, 1);
});
