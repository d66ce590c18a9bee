// The one tool-call parser (DESIGN §3): the first call of a model's text, in the R2E-Gym format
// (`<function=NAME><parameter=KEY>VALUE</parameter></function>`) or in the Hermes/Qwen2.5 format that chat templates
// render (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`), or OpenAI `tool_calls`, into one `ToolCall`
// shape, validated per tool with zod. With the tools known, a `{"name", "arguments"}` object of one of them, fenced
// or the whole reply, is a call too (what small models write). Never throws: every failure is a `{ ok: false, error }`
// whose text can go straight back to the model. `extractToolCallBlocks` turns the `<tool_call>` blocks of a reply
// into OpenAI tool calls.
import { randomUUID } from 'node:crypto';
import { z } from 'zod';

export type ToolArgValue = string | number | boolean | null | ToolArgValue[] | { [k: string]: ToolArgValue };

export interface ToolCall {
  name: string;
  args: Record<string, ToolArgValue>;
}

/** `none`: no call in the text (reminder); the others are errors to show the model. */
export type ToolCallErrorKind = 'none' | 'malformed' | 'unknown_tool' | 'invalid_args';

export type ParseResult = { ok: true; call: ToolCall } | { ok: false; kind: ToolCallErrorKind; error: string };

/** Per-tool argument schemas: the parsed args (strings from text, JSON values from OpenAI) go through these. */
export type ToolSchemas = Record<string, z.ZodType<Record<string, unknown>>>;

export interface ParseOptions {
  /** when given: unknown names are refused and arguments are validated (and coerced) by the tool's schema */
  tools?: ToolSchemas;
  /** aliases of tool names (e.g. `str_replace_editor` → `file_editor`) */
  aliases?: Record<string, string>;
  /** longest parameter value accepted, in characters */
  maxParamChars?: number;
}

export const DEFAULT_MAX_PARAM_CHARS = 200_000;

const FUNCTION_OPEN = '<function=';
const TOOL_CALL_OPEN = '<tool_call>';
const TOOL_CALL_CLOSE = '</tool_call>';
const FUNCTION_CLOSE = '</function>';
const PARAM_OPEN = '<parameter=';
const PARAM_CLOSE = '</parameter>';
const NAME_RE = /^[A-Za-z_][A-Za-z0-9_.-]{0,63}$/;

function fail(kind: ToolCallErrorKind, error: string): ParseResult {
  return { ok: false, kind, error };
}

/** One newline right after `<parameter=K>` and one right before `</parameter>` are layout, not value. */
function trimLayoutNewlines(v: string): string {
  let s = v;
  if (s.startsWith('\n')) s = s.slice(1);
  if (s.endsWith('\n')) s = s.slice(0, -1);
  return s;
}

/** The tag that starts at `i` as the model wrote it (to its `>`, a line end or 60 characters), for error messages. */
function tagAt(text: string, i: number): string {
  const m = /^<[^>\n]{0,60}>?/.exec(text.slice(i));
  return JSON.stringify(m ? m[0] : text.slice(i, i + 20));
}

/** Reads the `NAME>` part after an opening `<function=` / `<parameter=`; null when malformed. */
function readTagName(text: string, from: number): { name: string; end: number } | null {
  const close = text.indexOf('>', from);
  if (close < 0 || close - from > 80) return null;
  const name = text
    .slice(from, close)
    .trim()
    .replace(/^["']|["']$/g, '');
  if (!NAME_RE.test(name)) return null;
  return { name, end: close + 1 };
}

/**
 * Parses the first call of `text`: a `<function=...>` block or a `<tool_call>` block, whichever comes first.
 * `<function=…>`: parameter values run to the first `</parameter>` (so `<function=` or `</function>` inside a value
 * is text); a missing `</function>` at the end of the text is tolerated when every parameter is closed (a stop string
 * may have eaten it). Text between parameters is ignored. `<tool_call>`: see parseToolCallBlock.
 */
export function parseToolCall(text: unknown, opts: ParseOptions = {}): ParseResult {
  try {
    return parseToolCallUnsafe(typeof text === 'string' ? text : String(text ?? ''), opts);
  } catch (e) {
    return fail('malformed', `Could not parse the function call: ${(e as Error)?.message ?? String(e)}`);
  }
}

function parseToolCallUnsafe(text: string, opts: ParseOptions): ParseResult {
  const maxParam = opts.maxParamChars ?? DEFAULT_MAX_PARAM_CHARS;
  const start = text.indexOf(FUNCTION_OPEN);
  const block = text.indexOf(TOOL_CALL_OPEN);
  if (block >= 0 && (start < 0 || block < start)) return parseToolCallBlock(text, block, opts);
  if (start < 0) return bareJsonCall(text, opts) ?? fail('none', 'No function call found.');
  const head = readTagName(text, start + FUNCTION_OPEN.length);
  if (!head) {
    return fail('malformed', `Malformed function call: ${tagAt(text, start)} is not \`<function=NAME>\` with a name of letters, digits or \`_\`.`);
  }
  const args: Record<string, ToolArgValue> = {};
  let i = head.end;
  for (;;) {
    const nextParam = text.indexOf(PARAM_OPEN, i);
    const nextClose = text.indexOf(FUNCTION_CLOSE, i);
    if (nextClose >= 0 && (nextParam < 0 || nextClose < nextParam)) break; // closed
    if (nextParam < 0) {
      // no closing tag and no more parameters: tolerated only if nothing but whitespace or a new block follows
      const rest = text.slice(i);
      const stray = rest.indexOf(FUNCTION_OPEN);
      const tail = stray >= 0 ? rest.slice(0, stray) : rest;
      const bad = tail.search(/<\/?parameter/);
      if (bad >= 0) {
        return fail('malformed', `Malformed function call: the tag ${tagAt(text, i + bad)} is not a well-formed \`<parameter=NAME>\` … \`</parameter>\`.`);
      }
      break;
    }
    const p = readTagName(text, nextParam + PARAM_OPEN.length);
    if (!p) return fail('malformed', `Malformed function call: ${tagAt(text, nextParam)} is not \`<parameter=NAME>\` with a name of letters, digits or \`_\`.`);
    const end = text.indexOf(PARAM_CLOSE, p.end);
    if (end < 0) return fail('malformed', `Malformed function call: parameter \`${p.name}\` is not closed with \`</parameter>\`.`);
    if (end - p.end > maxParam + 4) {
      return fail('malformed', `Parameter \`${p.name}\` is too long (${end - p.end} characters; the limit is ${maxParam}).`);
    }
    if (Object.prototype.hasOwnProperty.call(args, p.name)) {
      return fail('malformed', `Parameter \`${p.name}\` is given more than once.`);
    }
    args[p.name] = trimLayoutNewlines(text.slice(p.end, end));
    i = end + PARAM_CLOSE.length;
  }
  return validate({ name: head.name, args }, opts);
}

/**
 * The `<tool_call>` block at `at`: a JSON object `{"name": ..., "arguments": {...}}` (arguments may also be a JSON
 * string of an object, or absent). A missing `</tool_call>` at the end of the text is tolerated when the JSON is whole.
 */
function parseToolCallBlock(text: string, at: number, opts: ParseOptions): ParseResult {
  const from = at + TOOL_CALL_OPEN.length;
  const close = text.indexOf(TOOL_CALL_CLOSE, from);
  const body = (close >= 0 ? text.slice(from, close) : text.slice(from)).trim();
  const limit = (opts.maxParamChars ?? DEFAULT_MAX_PARAM_CHARS) * 4;
  if (body.length > limit) return fail('malformed', `The tool call is too long (${body.length} characters; the limit is ${limit}).`);
  const call = toolCallJson(body);
  if ('error' in call) {
    const closed = close >= 0 ? '' : ' (and it has no closing `</tool_call>`)';
    return fail('malformed', `Malformed tool call: ${call.error}${closed}. Write <tool_call>{"name": FUNCTION_NAME, "arguments": {...}}</tool_call>.`);
  }
  return validate(call, opts);
}

/**
 * A reply with neither tag that writes its call as a `{"name": TOOL, "arguments": {...}}` object, in a fenced code
 * block (```json … ```) or as the whole reply, as small instruct models do (Qwen2.5-Coder-0.5B wrote `finish` so in
 * every turn of an evaluation, and was told each time that it had made no call). Only with `opts.tools`, and only for
 * one of their names (or an alias): JSON that shows data or names anything else is no call. An object that names a
 * tool but is not valid JSON is a malformed call, named as such.
 */
function bareJsonCall(text: string, opts: ParseOptions): ParseResult | null {
  const tools = opts.tools;
  if (!tools) return null;
  const known = (name: string) => Object.prototype.hasOwnProperty.call(tools, opts.aliases?.[name] ?? name);
  const bodies = [...text.matchAll(/```[A-Za-z]*[ \t]*\n([\s\S]*?)```/g)].map((m) => m[1]!.trim());
  const whole = text.trim();
  if (whole.startsWith('{') && whole.endsWith('}')) bodies.push(whole);
  let malformed: ParseResult | null = null;
  for (const body of bodies) {
    if (!body.startsWith('{')) continue;
    const call = toolCallJson(body, 'it');
    if (!('error' in call)) {
      if (known(call.name)) return validate(call, opts);
      continue;
    }
    const named = /"name"\s*:\s*"([^"]{1,64})"/.exec(body)?.[1];
    if (named && known(named) && !malformed) malformed = fail('malformed', `Malformed tool call: the object naming \`${named}\` is not a valid call: ${call.error}.`);
  }
  return malformed;
}

/** `{"name", "arguments"}` JSON text as a call, or what is wrong with it. */
function toolCallJson(body: string, where = 'the text inside <tool_call>'): ToolCall | { error: string } {
  let v: unknown;
  try {
    v = JSON.parse(body);
  } catch (e) {
    return { error: `${where} is not valid JSON (${(e as Error).message})` };
  }
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return { error: `${where} must be a JSON object` };
  const { name, arguments: raw } = v as { name?: unknown; arguments?: unknown };
  if (typeof name !== 'string' || !name.trim()) return { error: 'the JSON object has no "name" string' };
  let args: unknown = raw ?? {};
  if (typeof raw === 'string') {
    try {
      args = raw.trim() === '' ? {} : JSON.parse(raw);
    } catch (e) {
      return { error: `"arguments" of \`${name}\` is a string that is not JSON (${(e as Error).message})` };
    }
  }
  if (args === null || typeof args !== 'object' || Array.isArray(args)) return { error: `"arguments" of \`${name}\` must be a JSON object` };
  return { name: name.trim(), args: args as Record<string, ToolArgValue> };
}

export interface ExtractedToolCalls {
  /** the text without its well-formed blocks (null when nothing but calls remains) */
  content: string | null;
  toolCalls: { id: string; type: 'function'; function: { name: string; arguments: string } }[];
}

const TOOL_CALL_BLOCK = /<tool_call>\s*([\s\S]*?)\s*<\/tool_call>/g;

/**
 * Every `<tool_call>` block of a reply as OpenAI `tool_calls` (what an OpenAI-compatible chat endpoint returns for a
 * template that renders tools); a block that is not a well-formed call stays in the content, for the caller to see.
 */
export function extractToolCallBlocks(text: string, idOf: () => string = () => `call_${randomUUID().replace(/-/g, '').slice(0, 24)}`): ExtractedToolCalls {
  const toolCalls: ExtractedToolCalls['toolCalls'] = [];
  const content = text.replace(TOOL_CALL_BLOCK, (block, json: string) => {
    const call = toolCallJson(json);
    if ('error' in call) return block;
    toolCalls.push({ id: idOf(), type: 'function', function: { name: call.name, arguments: JSON.stringify(call.args) } });
    return '';
  });
  const trimmed = content.trim();
  return { content: toolCalls.length && trimmed === '' ? null : toolCalls.length ? trimmed : text, toolCalls };
}

const OpenAIToolCallSchema = z.object({
  function: z.object({ name: z.string(), arguments: z.union([z.string(), z.record(z.string(), z.unknown())]).optional() }),
});

/** The first of OpenAI's `tool_calls` (`[{function: {name, arguments: JSON string}}]`) as a `ToolCall`. */
export function parseOpenAIToolCalls(toolCalls: unknown, opts: ParseOptions = {}): ParseResult {
  try {
    if (!Array.isArray(toolCalls) || toolCalls.length === 0) return fail('none', 'No function call found.');
    const parsed = OpenAIToolCallSchema.safeParse(toolCalls[0]);
    if (!parsed.success) return fail('malformed', 'Malformed tool call: expected `{function: {name, arguments}}`.');
    const { name, arguments: raw } = parsed.data.function;
    let args: unknown = raw ?? {};
    if (typeof raw === 'string') {
      if (raw.length > (opts.maxParamChars ?? DEFAULT_MAX_PARAM_CHARS) * 4) return fail('malformed', 'Tool call arguments are too long.');
      try {
        args = raw.trim() === '' ? {} : JSON.parse(raw);
      } catch (e) {
        return fail('malformed', `Tool call arguments of \`${name}\` are not valid JSON: ${(e as Error).message}`);
      }
    }
    if (args === null || typeof args !== 'object' || Array.isArray(args)) {
      return fail('malformed', `Tool call arguments of \`${name}\` must be a JSON object.`);
    }
    return validate({ name: name.trim(), args: args as Record<string, ToolArgValue> }, opts);
  } catch (e) {
    return fail('malformed', `Could not parse the tool call: ${(e as Error)?.message ?? String(e)}`);
  }
}

function validate(call: ToolCall, opts: ParseOptions): ParseResult {
  const name = opts.aliases?.[call.name] ?? call.name;
  if (!opts.tools) return { ok: true, call: { name, args: call.args } };
  const schema = opts.tools[name];
  if (!schema) {
    return fail('unknown_tool', `Unknown function \`${call.name}\`. Available functions: ${Object.keys(opts.tools).join(', ')}.`);
  }
  const r = schema.safeParse(call.args);
  if (!r.success) {
    const problems = r.error.issues.map((iss) => `\`${iss.path.length ? iss.path.join('.') : '(arguments)'}\`: ${iss.message}`).join('; ');
    return fail('invalid_args', `Invalid arguments for \`${name}\`: ${problems}`);
  }
  return { ok: true, call: { name, args: r.data as Record<string, ToolArgValue> } };
}

/** Renders a call in the text format; `parseToolCall(formatToolCall(c))` gives `c` back (string values). */
export function formatToolCall(call: ToolCall): string {
  const parts = [`<function=${call.name}>`];
  for (const [k, v] of Object.entries(call.args)) {
    if (v === undefined) continue;
    const s = typeof v === 'string' ? v : JSON.stringify(v);
    parts.push(s.includes('\n') ? `<parameter=${k}>\n${s}\n</parameter>` : `<parameter=${k}>${s}</parameter>`);
  }
  parts.push(FUNCTION_CLOSE);
  return parts.join('\n');
}
