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
  applyChatTemplate(messages: readonly TemplateMessage[], opts: ChatTemplateOptions): string;
}

/** A message as chat templates read it: ours, or OpenAI's with tool calls and tool results. */
export type TemplateMessage =
  | ChatMessage
  | {
      role: 'system' | 'user' | 'assistant' | 'tool';
      content: string | null;
      tool_calls?: { id?: string; type?: 'function'; function: { name: string; arguments: string | Record<string, unknown> } }[];
      tool_call_id?: string;
      name?: string;
    };

export interface ChatTemplateOptions {
  addGenerationPrompt: boolean;
  /** OpenAI `tools` (`[{type: 'function', function: {name, description, parameters}}]`), rendered by the template */
  tools?: readonly unknown[];
  /** extra template variables (vLLM's `chat_template_kwargs`, e.g. enable_thinking) */
  kwargs?: Record<string, unknown>;
}

/**
 * ChatML as every preset writes it; used when a tokenizer_config has no chat_template. Without tools it
 * is plain ChatML; with tools it renders them as Qwen3's template does (a `# Tools` system block, calls
 * as `<tool_call>` JSON, results as `<tool_response>` user turns), so tool-calling requests mean the same.
 */
export const CHATML_TEMPLATE =
  "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}" +
  "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}" +
  "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}" +
  '{{- \'\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n\' }}{%- endif %}' +
  '{%- for message in messages %}' +
  "{%- if tools and loop.first and message.role == 'system' %}" +
  "{%- elif message.role == 'tool' %}{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}" +
  "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content }}" +
  "{%- if message.tool_calls %}{%- for tc in message.tool_calls %}{%- if message.content or not loop.first %}{{- '\\n' }}{%- endif %}" +
  '{{- \'<tool_call>\\n{"name": "\' + tc.function.name + \'", "arguments": \' }}' +
  "{%- if tc.function.arguments is string %}{{- tc.function.arguments }}{%- else %}{{- tc.function.arguments | tojson }}{%- endif %}{{- '}\\n</tool_call>' }}{%- endfor %}{%- endif %}" +
  "{{- '<|im_end|>\\n' }}{%- endif %}{%- endfor %}" +
  "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

/**
 * The tool format swerl's agents use with a model, from its chat template: `openai` when the template renders OpenAI
 * `tools` and asks for `<tool_call>` JSON calls (Qwen2.5's, our presets'), which lib/toolcall.ts parses; `text` (the
 * `<function=…>` format our prompt describes) when it renders no tools (SmolLM2) or asks for calls in a format the
 * parser does not read.
 */
export function autoToolFormat(chatTemplate: string): 'openai' | 'text' {
  return /\btools\b/.test(chatTemplate) && chatTemplate.includes('<tool_call>') ? 'openai' : 'text';
}

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
    added_tokens: z.array(z.object({ id: z.number().int().nonnegative(), content: z.string(), special: z.boolean().optional() }).loose()).optional(),
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

/** Reads `dir/tokenizer.json` and `dir/tokenizer_config.json` (optional; the chat template may be `dir/chat_template.jinja`). */
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
  const config = (rawConfig === undefined ? {} : parseJson(configPath, rawConfig)) as Record<string, unknown>;
  if (config.chat_template === undefined) {
    // transformers ≥ 4.47 saves the template beside the config by default
    const jinja = await readFile(join(dir, 'chat_template.jinja'), 'utf8').catch(() => undefined);
    if (jinja !== undefined) config.chat_template = jinja;
  }
  return tokenizerFromJson(parseJson(jsonPath, rawJson), config, dir);
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
    applyChatTemplate(messages: readonly TemplateMessage[], opts: ChatTemplateOptions): string {
      return template.render({
        ...opts.kwargs,
        // templates call string methods on content: OpenAI's null (a call-only assistant turn) is ''
        messages: messages.map((m) => (m.content === null ? { ...m, content: '' } : m)),
        ...(opts.tools?.length ? { tools: opts.tools } : {}),
        add_generation_prompt: opts.addGenerationPrompt,
        eos_token: eosText,
        bos_token: bosText ?? '',
      });
    },
  };
}
