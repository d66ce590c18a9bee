// Tool calls in generated text: `<tool_call>{"name": ..., "arguments": ...}</tool_call>` blocks (the
// Qwen3 / Hermes format that chat templates render), returned as OpenAI `tool_calls`.
import { randomUUID } from 'node:crypto';

const TOOL_CALL_BLOCK = /<tool_call>\s*([\s\S]*?)\s*<\/tool_call>/g;

export interface ParsedToolCalls {
  content: string | null;
  toolCalls: { id: string; type: 'function'; function: { name: string; arguments: string } }[];
}

/** Splits generated text into content and tool calls; a block that is not valid JSON stays in the content. */
export function parseToolCallBlocks(text: string, idOf: () => string = () => `call_${randomUUID().replace(/-/g, '').slice(0, 24)}`): ParsedToolCalls {
  const toolCalls: ParsedToolCalls['toolCalls'] = [];
  const content = text.replace(TOOL_CALL_BLOCK, (block, json: string) => {
    try {
      const v = JSON.parse(json) as { name?: unknown; arguments?: unknown };
      if (typeof v.name !== 'string' || !v.name) return block;
      const args = v.arguments === undefined ? {} : v.arguments;
      toolCalls.push({ id: idOf(), type: 'function', function: { name: v.name, arguments: typeof args === 'string' ? args : JSON.stringify(args) } });
      return '';
    } catch {
      return block;
    }
  });
  const trimmed = content.trim();
  return { content: toolCalls.length && trimmed === '' ? null : toolCalls.length ? trimmed : text, toolCalls };
}
