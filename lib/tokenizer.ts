// Tokenizers from a Hugging Face model directory (DESIGN §4): `tokenizer.json` through
// @huggingface/tokenizers, chat templates from `tokenizer_config.json` through @huggingface/jinja.
// Our tiny presets and real Qwen3 checkpoints load through this one code path.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import { Template } from '@huggingface/jinja';
import { z } from 'zod';
import type { ChatMessage } from './types.ts';

export interface Tokenizer {
  /** token ids of `text`; special tokens written in the text (`<|im_start|>`) become their ids; no BOS added */
  encode(text: string): number[];
  decode(ids: ArrayLike<number>, opts?: { skipSpecial?: boolean }): string;
  /** id of one vocabulary entry (special or not); throws naming the token when absent */
  tokenId(token: string): number;
  /** vocabulary entry of `id`, or undefined when the id is outside the vocabulary */
  tokenText(id: number): string | undefined;
  /** ids 0..vocabSize-1 (model vocabulary plus added tokens) */
  readonly vocabSize: number;
  readonly imStart: number;
  readonly imEnd: number;
  /** end-of-sequence id from tokenizer_config `eos_token` (Qwen3: `<|im_end|>`) */
  readonly eos: number;
  /** ids of all special tokens */
  readonly specialIds: readonly number[];
  readonly chatTemplate: string;
  applyChatTemplate(messages: ChatMessage[], opts: { addGenerationPrompt: boolean }): string;
}

/** ChatML as every preset writes it; used when a tokenizer_config has no chat_template. */
export const CHATML_TEMPLATE =
  "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endfor %}" +
  "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

const tokenSpec = z.union([z.string(), z.object({ content: z.string() }).loose()]).nullish();

const tokenizerConfigSchema = z
  .object({
    chat_template: z.union([z.string(), z.array(z.object({ name: z.string(), template: z.string() }).loose())]).optional(),
    eos_token: tokenSpec,
    bos_token: tokenSpec,
    pad_token: tokenSpec,
  })
  .loose();

const tokenizerJsonSchema = z
  .object({
    model: z.object({ type: z.string(), vocab: z.unknown() }).loose(),
    added_tokens: z
      .array(z.object({ id: z.number().int().nonnegative(), content: z.string(), special: z.boolean().optional() }).loose())
      .optional(),
  })
  .loose();

function tokenContent(spec: z.infer<typeof tokenSpec>): string | undefined {
  if (spec == null) return undefined;
  return typeof spec === 'string' ? spec : spec.content;
}

function describeZod(file: string, err: z.ZodError): string {
  const i = err.issues[0];
  return `${file}: ${i ? `${i.path.join('.') || '(root)'}: ${i.message}` : 'invalid'}`;
}

/** Reads `dir/tokenizer.json` and `dir/tokenizer_config.json` (the latter optional). */
export async function loadTokenizer(dir: string): Promise<Tokenizer> {
  const jsonPath = join(dir, 'tokenizer.json');
  let rawJson: string;
  try {
    rawJson = await readFile(jsonPath, 'utf8');
  } catch (e) {
    throw new Error(`tokenizer: cannot read ${jsonPath}: ${(e as Error).message}`);
  }
  let rawConfig: string | undefined;
  const configPath = join(dir, 'tokenizer_config.json');
  try {
    rawConfig = await readFile(configPath, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw new Error(`tokenizer: cannot read ${configPath}: ${(e as Error).message}`);
  }
  return tokenizerFromJson(parseJson(jsonPath, rawJson), rawConfig === undefined ? {} : parseJson(configPath, rawConfig), dir);
}

function parseJson(path: string, text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new Error(`tokenizer: ${path} is not valid JSON: ${(e as Error).message}`);
  }
}

/** Builds a tokenizer from already-parsed `tokenizer.json` and `tokenizer_config.json` objects. */
export function tokenizerFromJson(tokenizerJson: unknown, tokenizerConfig: unknown, source = '(memory)'): Tokenizer {
  const tj = tokenizerJsonSchema.safeParse(tokenizerJson);
  if (!tj.success) throw new Error(describeZod(`${source}/tokenizer.json`, tj.error));
  const tc = tokenizerConfigSchema.safeParse(tokenizerConfig);
  if (!tc.success) throw new Error(describeZod(`${source}/tokenizer_config.json`, tc.error));
  const cfg = tc.data;

  let hf: HfTokenizer;
  try {
    hf = new HfTokenizer(tokenizerJson as object, { clean_up_tokenization_spaces: false, ...cfg });
  } catch (e) {
    throw new Error(`tokenizer: ${source}/tokenizer.json does not load: ${(e as Error).message}`);
  }
  const vocab = hf.get_vocab(true);
  let maxId = -1;
  for (const id of vocab.values()) if (id > maxId) maxId = id;
  const vocabSize = maxId + 1;
  const specialIds = (tj.data.added_tokens ?? []).filter((t) => t.special).map((t) => t.id);

  const tokenId = (token: string): number => {
    const id = vocab.get(token);
    if (id === undefined) throw new Error(`tokenizer ${source}: token ${JSON.stringify(token)} is not in the vocabulary`);
    return id;
  };
  const idToText = new Map<number, string>();
  for (const [text, id] of vocab) idToText.set(id, text);

  let chatTemplate = CHATML_TEMPLATE;
  if (typeof cfg.chat_template === 'string') chatTemplate = cfg.chat_template;
  else if (Array.isArray(cfg.chat_template)) {
    const def = cfg.chat_template.find((t) => t.name === 'default') ?? cfg.chat_template[0];
    if (def) chatTemplate = def.template;
  }
  const template = new Template(chatTemplate);
  const eosText = tokenContent(cfg.eos_token) ?? '<|endoftext|>';
  const bosText = tokenContent(cfg.bos_token);
  const imStart = tokenId('<|im_start|>');
  const imEnd = tokenId('<|im_end|>');
  const eos = tokenId(eosText);

  return {
    vocabSize,
    imStart,
    imEnd,
    eos,
    specialIds,
    chatTemplate,
    encode(text: string): number[] {
      if (text.length === 0) return [];
      return hf.encode(text, { add_special_tokens: false }).ids;
    },
    decode(ids: ArrayLike<number>, opts: { skipSpecial?: boolean } = {}): string {
      if (ids.length === 0) return '';
      const list = Array.from(ids);
      for (const id of list) {
        if (!Number.isInteger(id) || id < 0 || id >= vocabSize) throw new Error(`tokenizer ${source}: decode: id ${id} is outside the vocabulary [0, ${vocabSize})`);
      }
      return hf.decode(list, { skip_special_tokens: opts.skipSpecial ?? false, clean_up_tokenization_spaces: false });
    },
    tokenId,
    tokenText(id: number): string | undefined {
      return idToText.get(id);
    },
    applyChatTemplate(messages: ChatMessage[], opts: { addGenerationPrompt: boolean }): string {
      return template.render({
        messages,
        add_generation_prompt: opts.addGenerationPrompt,
        eos_token: eosText,
        bos_token: bosText ?? '',
      });
    },
  };
}
