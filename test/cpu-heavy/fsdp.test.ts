// The FSDP engine (gpu-learner/fsdp) on the CPU with gloo: 2 ranks vs 1 rank vs the native engine on the same
// checkpoint and batches (loss, grad norm, weights after three AdamW steps; tolerances in crosscheck.ts); a
// checkpoint it writes (sharded safetensors + index) loads in the native engine; resuming from its checkpoint
// gives the same steps as going on; bad input is refused naming the field, and the group lives on.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { FSDP_CONFIG, FSDP_HP, compareTraces, formatRows, fsdpOptions, fsdpSteps, nativeSteps, packedBatch, weightsOf, type StepTrace } from '../../gpu-learner/fsdp/crosscheck.ts';
import { FsdpInputError, FsdpLearner, validateOptions, writeTrainBatch } from '../../gpu-learner/fsdp/index.ts';
import { writeRandomCheckpoint } from '../../gpu-learner/index.ts';
import { validateConfig } from '../../lib/config.ts';

const root = mkdtempSync(join(tmpdir(), 'fsdp-'));
const model = join(root, 'model');
let native: StepTrace;
let initial: Map<string, Float32Array>;
let two: FsdpLearner;
/** `two`'s collective timeout: it idles longer than that between tests 1 and 2, as a worker does between steps */
const COLLECTIVE_S = 15;
let lastUse = 0;
before(async () => {
  writeRandomCheckpoint(model, FSDP_CONFIG, 7, { normNoise: 0.1 });
  initial = await weightsOf(model);
  native = await nativeSteps(model, join(root, 'native'));
  two = await FsdpLearner.start(fsdpOptions(2, { collectiveTimeoutSeconds: COLLECTIVE_S }));
});
after(async () => {
  await two?.close();
  rmSync(root, { recursive: true, force: true });
});

test('2 ranks = 1 rank = native: loss, grad norm, weights after three AdamW steps; the checkpoint loads natively', async () => {
  const t2 = await fsdpSteps(two, model, join(root, 'fsdp-2'), root);
  lastUse = Date.now();
  const one = await FsdpLearner.start(fsdpOptions(1));
  let t1: StepTrace;
  try {
    t1 = await fsdpSteps(one, model, join(root, 'fsdp-1'), root);
  } finally {
    await one.close();
  }
  const rows = [...compareTraces('1 rank vs native', t1, native, initial), ...compareTraces('2 ranks vs native', t2, native, initial)];
  console.log(formatRows(rows));
  for (const r of rows) assert.ok(r.ok, `${r.config}: ${r.quantity} differs by ${r.diff} > ${r.tol} (${r.at ?? ''})`);
  // sharded safetensors with an index, F32, config dtype float32, AdamW state and the step count
  const files = readdirSync(join(root, 'fsdp-2'));
  assert.ok(files.filter((f) => /^model-\d{5}-of-\d{5}\.safetensors$/.test(f)).length >= 2, files.join(' '));
  assert.ok(files.includes('model.safetensors.index.json') && files.includes('optimizer') && !files.includes('sharded'), files.join(' '));
  // the source's dtype key (torch_dtype here, dtype from transformers 5) says float32, as the F32 weights are
  const cfg = JSON.parse(readFileSync(join(root, 'fsdp-2', 'config.json'), 'utf8'));
  assert.equal(cfg.torch_dtype ?? cfg.dtype, 'float32');
  assert.ok(![cfg.torch_dtype, cfg.dtype].includes('bfloat16'), JSON.stringify(cfg));
  assert.equal(JSON.parse(readFileSync(join(root, 'fsdp-2', 'trainer_state.json'), 'utf8')).step, 3);
});

test('idle past the collective timeout, then resuming from the checkpoint after step 1 gives the same steps 2 and 3 as going on', async () => {
  const idle = COLLECTIVE_S * 1000 + 2000 - (Date.now() - lastUse);
  if (idle > 0) await new Promise((r) => setTimeout(r, idle));
  assert.ok(two.alive, 'the group waits for requests without a collective timeout');
  await two.load(model);
  const b = (k: number) => {
    const p = join(root, `resume-${k}.safetensors`);
    writeTrainBatch(p, packedBatch(FSDP_CONFIG.vocab_size, k));
    return p;
  };
  await two.trainStep(b(1), FSDP_HP);
  await two.save(join(root, 'after-1'), model);
  const cont = [await two.trainStep(b(2), FSDP_HP), await two.trainStep(b(3), FSDP_HP)];
  await two.load(join(root, 'after-1'));
  assert.equal(two.step, 1);
  const resumed = [await two.trainStep(b(2), FSDP_HP), await two.trainStep(b(3), FSDP_HP)];
  assert.deepEqual(
    resumed.map((s) => s.gradNorm),
    cont.map((s) => s.gradNorm),
  );
  assert.equal(two.step, 3);
});

test('bad input names the field; the process group goes on', async () => {
  const v = validateConfig({ learner: { engine: 'deepspeed' } });
  assert.match(v.ok ? '' : v.errors.join(), /config.learner.engine: must be one of "native", "fsdp", got "deepspeed"/);
  assert.throws(
    () => validateOptions(fsdpOptions(64)),
    (e: Error) => e instanceof FsdpInputError && /config.learner.fsdp.nprocPerNode: 64 processes per node but this host has \d+ CPU cores/.test(e.message),
  );

  await two.load(model);
  const long = join(root, 'long.safetensors');
  writeTrainBatch(long, packedBatch(FSDP_CONFIG.vocab_size, 1, [30, 95]));
  await assert.rejects(
    two.trainStep(long, FSDP_HP),
    (e: Error) => e instanceof FsdpInputError && /config.learner.fsdp.maxTokensPerMicroBatch: sequence 1 has 95 tokens, more than the budget of 80/.test(e.message),
  );

  const alien = join(root, 'alien');
  mkdirSync(alien);
  writeFileSync(join(alien, 'config.json'), JSON.stringify({ architectures: ['FrobnicatorForCausalLM'], model_type: 'frobnicator', hidden_size: 8 }));
  await assert.rejects(
    two.load(alien),
    (e: Error) =>
      e instanceof FsdpInputError &&
      /alien\/config.json: model_type "frobnicator" \(architectures \["FrobnicatorForCausalLM"\]\) is not a model transformers \S+ knows/.test(e.message),
  );

  const oov = join(root, 'oov.safetensors');
  const bad = packedBatch(FSDP_CONFIG.vocab_size, 1);
  bad.ids[5] = 500;
  writeTrainBatch(oov, bad);
  await assert.rejects(two.trainStep(oov, FSDP_HP), /ids\[5\]=500 is outside the vocabulary \[0, 97\)/);

  const ok = join(root, 'ok.safetensors');
  writeTrainBatch(ok, packedBatch(FSDP_CONFIG.vocab_size, 1));
  const s = await two.trainStep(ok, FSDP_HP);
  assert.ok(s.gradNorm > 0 && !s.skipped && two.alive, 'the group still steps');
  assert.ok(!existsSync(join(alien, 'model.safetensors')));
});
