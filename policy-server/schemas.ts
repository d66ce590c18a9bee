// Request bodies of the policy server's endpoints (zod). Parameters we do not implement are refused: the
// bodies are strict, and parameters whose only implemented value is the neutral one accept only that.
import { z } from 'zod';

/** Most top log-probs per position a request may ask for (OpenAI's limit). */
export const MAX_TOP_LOGPROBS = 20;
/** Most samples (choices) one request may ask for: each decodes as its own sequence with its own KV cache. */
export const MAX_SAMPLES = 64;

const int = z.number().int();
const ids = () => z.array(int.nonnegative());
/** Parameters whose only implemented value is the neutral one (0 penalty, no bias): anything else is a 400. */
const neutralOnly = (what: string) =>
  z
    .number()
    .refine((v) => v === 0, `${what} is not implemented by this server (only 0)`)
    .nullish();

/** Sampling parameters both completion endpoints take. */
const samplingFields = {
  model: z.string().optional(),
  max_tokens: int.min(1).nullish(),
  temperature: z.number().min(0).default(1),
  top_p: z.number().gt(0).max(1).default(1),
  seed: int.nullish(),
  /** strings that end the completion; the text stops before the first one */
  stop: z.union([z.string().min(1), z.array(z.string().min(1)).max(16)]).nullish(),
  stop_token_ids: ids().nullish(),
  allowed_token_ids: ids().min(1).nullish(),
  skip_special_tokens: z.boolean().nullish(),
  /** samples of the prompt, one choice each; they share the prompt's prefill; with a seed, sample i > 0 gets lib/seed.ts's sampleSeed */
  n: int.min(1).max(MAX_SAMPLES).nullish(),
  stream: z.literal(false).nullish(),
  /** end-user id: metadata, no effect on sampling */
  user: z.string().nullish(),
  presence_penalty: neutralOnly('presence_penalty'),
  frequency_penalty: neutralOnly('frequency_penalty'),
  logit_bias: z
    .record(z.string(), z.number())
    .refine((v) => Object.keys(v).length === 0, 'logit_bias is not implemented by this server (only {})')
    .nullish(),
};

/** POST /v1/completions (vLLM's dialect: token-id prompts, token ids back). */
export const CompletionBodySchema = z
  .object({
    ...samplingFields,
    prompt: z.union([ids().min(1), z.array(ids().min(1)).length(1), z.string().min(1)], {
      error: 'expected a non-empty array of token ids (or [[ids]]), or a string',
    }),
    logprobs: int.min(0).max(MAX_TOP_LOGPROBS).nullish(),
    return_tokens_as_token_ids: z.boolean().nullish(),
    return_token_ids: z.boolean().nullish(),
    echo: z.literal(false).nullish(),
    best_of: z.literal(1).nullish(),
    /** swerl's extension: sample only from the model loaded from this directory, else 409 (the caller reloads it) */
    model_path: z.string().min(1).nullish(),
  })
  .strict();
export type CompletionBody = z.infer<typeof CompletionBodySchema>;

const ContentSchema = z.union([z.string(), z.array(z.object({ type: z.literal('text'), text: z.string() }).strict(), { error: 'only text content parts are supported' })]);
const ToolCallSchema = z
  .object({
    id: z.string().optional(),
    type: z.literal('function').optional(),
    function: z.object({ name: z.string().min(1), arguments: z.union([z.string(), z.record(z.string(), z.unknown())]) }).strict(),
  })
  .strict();
const MessageSchema = z.discriminatedUnion('role', [
  z.object({ role: z.literal('system'), content: ContentSchema, name: z.string().optional() }).strict(),
  z.object({ role: z.literal('developer'), content: ContentSchema, name: z.string().optional() }).strict(),
  z.object({ role: z.literal('user'), content: ContentSchema, name: z.string().optional() }).strict(),
  z.object({ role: z.literal('assistant'), content: ContentSchema.nullish(), tool_calls: z.array(ToolCallSchema).nullish(), name: z.string().optional() }).strict(),
  z.object({ role: z.literal('tool'), content: ContentSchema, tool_call_id: z.string() }).strict(),
]);
const ToolSchema = z
  .object({
    type: z.literal('function'),
    function: z
      .object({ name: z.string().min(1), description: z.string().optional(), parameters: z.record(z.string(), z.unknown()).optional(), strict: z.boolean().nullish() })
      .strict(),
  })
  .strict();

/** POST /v1/chat/completions. */
export const ChatBodySchema = z
  .object({
    ...samplingFields,
    messages: z.array(MessageSchema).min(1),
    max_completion_tokens: int.min(1).nullish(),
    tools: z.array(ToolSchema).nullish(),
    /** 'required' and a named function would need constrained decoding: not implemented */
    tool_choice: z.enum(['auto', 'none']).nullish(),
    parallel_tool_calls: z.boolean().nullish(),
    logprobs: z.boolean().nullish(),
    top_logprobs: int.min(0).max(MAX_TOP_LOGPROBS).nullish(),
    return_token_ids: z.boolean().nullish(),
    chat_template_kwargs: z.record(z.string(), z.unknown()).nullish(),
  })
  .strict();
export type ChatBody = z.infer<typeof ChatBodySchema>;
export type ChatMessageBody = ChatBody['messages'][number];

/** POST /update_weights_from_disk (SGLang's). */
export const UpdateWeightsBodySchema = z.object({
  model_path: z.string().min(1),
  /** -1: a model directory that is no run's checkpoint (an evaluation of a path, as the learner worker serves it) */
  checkpoint: int.min(-1).nullish(),
});

/** A message's content as text (text parts joined); null stays null. */
export function textOf(c: ChatMessageBody['content'] | null | undefined): string | null {
  return c === null || c === undefined ? null : typeof c === 'string' ? c : c.map((p) => p.text).join('');
}
