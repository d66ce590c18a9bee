// The tokenizers of the test presets (lib/presets.ts): a byte-level BPE whose merges are learnt from a fixed corpus
// (tiny) and a character vocabulary with one token per FrozenLake action (frozenlake*). Each is written as the
// tokenizer.json / tokenizer_config.json pair transformers and our lib/tokenizer.ts both read.
import { CHATML_TEMPLATE } from './tokenizer.ts';

export const SPECIAL_TOKENS = { endOfText: '<|endoftext|>', imStart: '<|im_start|>', imEnd: '<|im_end|>' } as const;

/** A preset's tokenizer files and the ids the model config names. */
export interface TokenizerFiles {
  tokenizerJson: Record<string, unknown>;
  tokenizerConfig: Record<string, unknown>;
  vocabSize: number;
  ids: { endOfText: number; imStart: number; imEnd: number };
}

// ---------------------------------------------------------------------------------------------
// Byte-level BPE (tiny): GPT-2's byte-to-unicode alphabet, merges learnt from a fixed corpus.

/** GPT-2 bytes_to_unicode: printable bytes map to themselves, the rest to U+0100 onwards. */
export function byteToUnicode(): string[] {
  const out: string[] = new Array(256);
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    out[b] = String.fromCodePoint(printable ? b : 256 + extra++);
  }
  return out;
}

// Qwen2/Qwen3's pre-tokenizer regex (Oniguruma syntax, as tokenizer.json stores it).
const QWEN_SPLIT_REGEX = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// The same split in JavaScript syntax, used only to learn merges.
const JS_SPLIT_REGEX = /'(?:[sStTmMdD]|[rR][eE]|[vV][eE]|[lL][lL])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+/gu;

// English prose and code the tiny tokenizer's merges are learnt from (written for this project).
const MERGE_CORPUS = `
The agent reads the issue, looks at the repository and edits the files that need to change.
Then it runs the tests. When the tests pass, the agent submits the patch and the episode ends.
A policy that solves the task gets a reward of one; a policy that does not gets zero.
The learner computes the advantage of each sample in the group and updates the weights of the model.
We train the model on many tasks, and the model learns to find the bug, write the fix, and test it.
This is the first line of the file. This is the second line of the file. There are more lines in the file.
If the function returns the wrong value, the test fails and the error message shows the expected value.
You are a helpful assistant. The user asks a question and the assistant answers with a short reply.
def test_function_returns_value():
    result = compute_value(input_data, options=None)
    assert result == expected_value
    return result

class Config:
    def __init__(self, name, value=None):
        self.name = name
        self.value = value

    def to_dict(self):
        return {"name": self.name, "value": self.value}

import os
import sys
from typing import List, Optional

for index in range(len(items)):
    if items[index] is None:
        continue
    print(f"item {index}: {items[index]}")

export function parseConfig(text: string): Config {
  const value = JSON.parse(text);
  if (value === null || typeof value !== 'object') {
    throw new Error('config: expected an object');
  }
  return value as Config;
}

export async function readFile(path: string): Promise<string> {
  const data = await fs.readFile(path, 'utf8');
  return data.trim();
}

const result = items.filter((item) => item.value > 0).map((item) => item.name);
for (const item of items) {
  console.log(item.name, item.value);
}
git diff --cached
python -m pytest tests/test_config.py -rA
<function=execute_bash><parameter=cmd>ls -la /testbed</parameter></function>
<function=file_editor><parameter=command>view</parameter><parameter=path>/testbed/setup.py</parameter></function>
<function=finish><parameter=command>submit</parameter></function>
The system prompt tells the assistant which tools it can use and how to call them with parameters.
Every iteration samples a batch of tasks, rolls out eight episodes per task, grades them and trains.
The checkpoint is saved after the update, and the server loads the new weights before the next rollouts.
`;

/** Learns `count` BPE merges over the byte-level alphabet: most frequent pair first, ties by string order. */
export function learnMerges(corpus: string, count: number): [string, string][] {
  const b2u = byteToUnicode();
  const enc = new TextEncoder();
  const wordCounts = new Map<string, number>();
  for (const m of corpus.matchAll(JS_SPLIT_REGEX)) {
    const w = Array.from(enc.encode(m[0]), (b) => b2u[b]!).join('');
    wordCounts.set(w, (wordCounts.get(w) ?? 0) + 1);
  }
  const words = [...wordCounts.entries()].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)).map(([w, c]) => ({ parts: Array.from(w), count: c }));
  const merges: [string, string][] = [];
  while (merges.length < count) {
    const pairCounts = new Map<string, number>();
    for (const w of words) {
      for (let i = 0; i + 1 < w.parts.length; i++) {
        const key = `${w.parts[i]}\u0000${w.parts[i + 1]}`;
        pairCounts.set(key, (pairCounts.get(key) ?? 0) + w.count);
      }
    }
    let best: string | undefined;
    let bestCount = 1; // a merge must occur at least twice
    for (const [key, c] of pairCounts) {
      if (c > bestCount || (c === bestCount && best !== undefined && key < best)) {
        best = key;
        bestCount = c;
      }
    }
    if (best === undefined) break;
    const [a, b] = best.split('\u0000') as [string, string];
    merges.push([a, b]);
    for (const w of words) {
      const next: string[] = [];
      for (let i = 0; i < w.parts.length; i++) {
        if (i + 1 < w.parts.length && w.parts[i] === a && w.parts[i + 1] === b) {
          next.push(a + b);
          i++;
        } else next.push(w.parts[i]!);
      }
      w.parts = next;
    }
  }
  return merges;
}

function addedToken(id: number, content: string) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true };
}

/** The fields of tokenizer.json before the pipeline: format version, no truncation or padding, the special tokens. */
function tokenizerJsonHead(ids: TokenizerFiles['ids']): Record<string, unknown> {
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [addedToken(ids.endOfText, SPECIAL_TOKENS.endOfText), addedToken(ids.imStart, SPECIAL_TOKENS.imStart), addedToken(ids.imEnd, SPECIAL_TOKENS.imEnd)],
  };
}

function tokenizerConfigFor(ids: TokenizerFiles['ids'], extra: Record<string, unknown>): Record<string, unknown> {
  const decoder: Record<string, unknown> = {};
  for (const [content, id] of [
    [SPECIAL_TOKENS.endOfText, ids.endOfText],
    [SPECIAL_TOKENS.imStart, ids.imStart],
    [SPECIAL_TOKENS.imEnd, ids.imEnd],
  ] as const) {
    decoder[String(id)] = { content, lstrip: false, normalized: false, rstrip: false, single_word: false, special: true };
  }
  return {
    add_bos_token: false,
    add_prefix_space: false,
    added_tokens_decoder: decoder,
    additional_special_tokens: [SPECIAL_TOKENS.imStart, SPECIAL_TOKENS.imEnd],
    bos_token: null,
    chat_template: CHATML_TEMPLATE,
    clean_up_tokenization_spaces: false,
    eos_token: SPECIAL_TOKENS.imEnd,
    errors: 'replace',
    model_max_length: 4096,
    pad_token: SPECIAL_TOKENS.endOfText,
    split_special_tokens: false,
    unk_token: null,
    ...extra,
  };
}

export const TINY_VOCAB_SIZE = 512;

export function tinyTokenizer(): TokenizerFiles {
  const b2u = byteToUnicode();
  const merges = learnMerges(MERGE_CORPUS, TINY_VOCAB_SIZE - 256 - 3);
  if (merges.length !== TINY_VOCAB_SIZE - 256 - 3) throw new Error(`presets: tiny merge corpus gave ${merges.length} merges, need ${TINY_VOCAB_SIZE - 259}`);
  const vocab: Record<string, number> = {};
  b2u.forEach((ch, b) => (vocab[ch] = b));
  merges.forEach(([a, b], i) => (vocab[a + b] = 256 + i));
  const ids = { endOfText: TINY_VOCAB_SIZE - 3, imStart: TINY_VOCAB_SIZE - 2, imEnd: TINY_VOCAB_SIZE - 1 };
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false };
  return {
    vocabSize: TINY_VOCAB_SIZE,
    ids,
    tokenizerJson: {
      ...tokenizerJsonHead(ids),
      normalizer: { type: 'NFC' },
      pre_tokenizer: {
        type: 'Sequence',
        pretokenizers: [{ type: 'Split', pattern: { Regex: QWEN_SPLIT_REGEX }, behavior: 'Isolated', invert: false }, byteLevel],
      },
      post_processor: byteLevel,
      decoder: byteLevel,
      model: {
        type: 'BPE',
        dropout: null,
        unk_token: null,
        continuing_subword_prefix: '',
        end_of_word_suffix: '',
        fuse_unk: false,
        byte_fallback: false,
        ignore_merges: false,
        vocab,
        merges,
      },
    },
    tokenizerConfig: tokenizerConfigFor(ids, { tokenizer_class: 'Qwen2Tokenizer' }),
  };
}

// ---------------------------------------------------------------------------------------------
// FrozenLake: character-level vocabulary (ASCII) so a random policy meets the action letters often.

/** Grid cells: start, frozen, hole, goal, and the agent's position. */
export const FROZENLAKE_CELLS = ['S', 'F', 'H', 'G', 'P'] as const;
/** Actions, one token each: Left, Down, Right, Up (gym's order 0..3). */
export const FROZENLAKE_ACTIONS = ['L', 'D', 'R', 'U'] as const;
/** Words that are one token each in the frozenlake vocabulary (besides single characters). */
export const FROZENLAKE_WORDS = ['system', 'user', 'assistant'] as const;
/** Characters the frozenlake vocabulary holds one token for: tab, newline and printable ASCII. */
export const FROZENLAKE_CHARS: readonly string[] = ['\t', '\n', ...Array.from({ length: 95 }, (_, i) => String.fromCharCode(32 + i))];
export const FROZENLAKE_UNK = '<unk>';

// Token ids of the frozenlake vocabulary: specials 0..2, <unk> 3, then FROZENLAKE_CHARS from 4,
// then the merges building FROZENLAKE_WORDS.
const FL_CHAR_BASE = 4;
function flCharId(ch: string): number {
  const i = FROZENLAKE_CHARS.indexOf(ch);
  if (i < 0) throw new Error(`presets: ${JSON.stringify(ch)} is not a frozenlake character`);
  return FL_CHAR_BASE + i;
}

/** Token ids of the frozenlake actions (L=50, D=42, R=56, U=59). */
export const FROZENLAKE_ACTION_IDS: Readonly<Record<(typeof FROZENLAKE_ACTIONS)[number], number>> = Object.freeze({
  L: flCharId('L'),
  D: flCharId('D'),
  R: flCharId('R'),
  U: flCharId('U'),
});
/** Token ids of the grid cells. */
export const FROZENLAKE_CELL_IDS: Readonly<Record<(typeof FROZENLAKE_CELLS)[number], number>> = Object.freeze({
  S: flCharId('S'),
  F: flCharId('F'),
  H: flCharId('H'),
  G: flCharId('G'),
  P: flCharId('P'),
});
export const FROZENLAKE_SPECIAL_IDS = Object.freeze({ endOfText: 0, imStart: 1, imEnd: 2, unk: 3 });

export function frozenLakeTokenizer(): TokenizerFiles {
  return frozenLakeVocabulary(false);
}

/**
 * The frozenlake vocabulary plus one token per run of 2 or 3 grid cells (FROZENLAKE_CELLS: 25 pairs, then 125
 * triples, ids from 117), so each row of a 3×3 map is one token (`PFF`, `FHF`, `FFG`) whose embedding says where
 * the agent and the holes of that row are. Single cells, actions and every other character keep their frozenlake ids.
 * Each triple is reachable from both of its pairs (`PF`+`F` and `P`+`FF`), so BPE's merge order always ends on it.
 */
export function frozenLakeRowsTokenizer(): TokenizerFiles {
  return frozenLakeVocabulary(true);
}

function frozenLakeVocabulary(rowTokens: boolean): TokenizerFiles {
  const vocab: Record<string, number> = {};
  vocab[FROZENLAKE_UNK] = FROZENLAKE_SPECIAL_IDS.unk;
  FROZENLAKE_CHARS.forEach((ch) => (vocab[ch] = flCharId(ch)));
  // Left-to-right merges that build each word: "u"+"s" -> "us", "us"+"e" -> "use", ...
  const merges: [string, string][] = [];
  let next = FL_CHAR_BASE + FROZENLAKE_CHARS.length;
  for (const word of FROZENLAKE_WORDS) {
    for (let i = 2; i <= word.length; i++) {
      const piece = word.slice(0, i);
      if (vocab[piece] !== undefined) continue;
      merges.push([word.slice(0, i - 1), word[i - 1]!]);
      vocab[piece] = next++;
    }
  }
  if (rowTokens) {
    for (const a of FROZENLAKE_CELLS)
      for (const b of FROZENLAKE_CELLS) {
        merges.push([a, b]);
        vocab[a + b] = next++;
      }
    for (const a of FROZENLAKE_CELLS)
      for (const b of FROZENLAKE_CELLS)
        for (const c of FROZENLAKE_CELLS) {
          merges.push([a + b, c], [a, b + c]);
          vocab[a + b + c] = next++;
        }
  }
  const ids = { endOfText: FROZENLAKE_SPECIAL_IDS.endOfText, imStart: FROZENLAKE_SPECIAL_IDS.imStart, imEnd: FROZENLAKE_SPECIAL_IDS.imEnd };
  return {
    vocabSize: next,
    ids,
    tokenizerJson: {
      ...tokenizerJsonHead(ids),
      normalizer: null,
      pre_tokenizer: null,
      post_processor: null,
      decoder: { type: 'Fuse' },
      model: {
        type: 'BPE',
        dropout: null,
        unk_token: FROZENLAKE_UNK,
        continuing_subword_prefix: null,
        end_of_word_suffix: null,
        fuse_unk: false,
        byte_fallback: false,
        ignore_merges: false,
        vocab,
        merges,
      },
    },
    tokenizerConfig: tokenizerConfigFor(ids, { tokenizer_class: 'PreTrainedTokenizerFast', unk_token: FROZENLAKE_UNK }),
  };
}
