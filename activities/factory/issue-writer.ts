// `--issue-writer URL`: any OpenAI-compatible server rewrites a factory task's template statement as a user's bug
// report (lib/factory/problem.ts issueWriterMessages). The rewrite goes through the same check as the template:
// lines holding a line of the fix are dropped, and a rewrite that is unusable (too short, still leaking, or the
// server failed) leaves the template in place; the record's provenance says which it is.
import { createChatClient } from '../../lib/policy/chat.ts';
import { listServerModels } from '../../lib/policy/preflight.ts';
import { issueWriterMessages, leakedLines, scrub } from '../../lib/factory/problem.ts';

/** shorter than this, a rewrite says less than the template */
const MIN_CHARS = 40;

export async function rewriteStatement(w: { url: string; model?: string }, template: string, patch: string, seed: number): Promise<{ text: string; by: string }> {
  try {
    const model = w.model ?? (await listServerModels({ baseUrl: w.url })).models[0];
    if (!model) return { text: template, by: 'template (the issue writer lists no model)' };
    const client = createChatClient({ baseUrl: w.url, model, timeoutMs: 300_000 });
    const r = await client.chat({ messages: issueWriterMessages(template), maxTokens: 1024, temperature: 0.7, topP: 0.95, seed });
    const text = scrub((r.content ?? '').trim(), patch);
    if (text.length < MIN_CHARS || leakedLines(text, patch).length) return { text: template, by: `template (the rewrite by ${model} was unusable)` };
    return { text, by: `issue writer ${model}` };
  } catch (e) {
    return { text: template, by: `template (the issue writer failed: ${(e as Error).message.slice(0, 200)})` };
  }
}
