// Chat templates and tokenizers of an imported model, ours against transformers' (issue 27): every conversation of
// test/fixtures/chat/corpus.json rendered by lib/tokenizer.ts (@huggingface/jinja) and by apply_chat_template
// (scripts/checks/chat_templates.py, the torch venv) must be the same bytes, and texts must encode to the same ids.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadTokenizer, type TemplateMessage } from '../../lib/tokenizer.ts';
import { SYSTEM_PROMPT } from '../../lib/swe/prompts.ts';
import { SWE_OPENAI_TOOLS, SYSTEM_PROMPT_TOOL_CALLS } from '../../lib/swe/tool-definitions.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const CHAT_CORPUS = join(ROOT, 'test/fixtures/chat/corpus.json');

export interface ChatCase {
  name: string;
  messages: TemplateMessage[];
  tools?: unknown[];
  addGenerationPrompt: boolean;
}

/** Texts whose ids must agree: code, digits, whitespace runs, unicode, special tokens written in the text. */
export const TOKENIZER_TEXTS = [
  'def f(x):\n    return x[len(x) - 1]  # 12345 + 0.5e-3\n',
  '  leading spaces,\ttabs\t\tand\r\nCRLF;   trailing   ',
  'Ünïcödé ✓, 日本語, emoji 🚀, ß, ǅ, \u00a0nbsp',
  '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n',
  '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
  "I'm sure they'll've done it 1,000,000 times",
];

/** The corpus with its SWE placeholders replaced by the prompts and tool definitions our agents send. */
export function chatCorpus(): ChatCase[] {
  const swe = (s: string) => (s === 'SWE_SYSTEM_PROMPT' ? SYSTEM_PROMPT : s === 'SWE_SYSTEM_PROMPT_TOOL_CALLS' ? SYSTEM_PROMPT_TOOL_CALLS : s);
  const doc = JSON.parse(readFileSync(CHAT_CORPUS, 'utf8')) as { cases: (ChatCase & { tools?: unknown[] | string })[] };
  return doc.cases.map((c) => ({
    ...c,
    messages: c.messages.map((m) => ({ ...m, content: typeof m.content === 'string' ? swe(m.content) : m.content }) as TemplateMessage),
    ...(c.tools === undefined ? {} : { tools: c.tools === 'SWE_OPENAI_TOOLS' ? [...SWE_OPENAI_TOOLS] : (c.tools as unknown[]) }),
  }));
}

export interface ChatParity {
  cases: number;
  /** cases whose renders differ: the first differing offset and the text around it */
  mismatches: { name: string; at: number; ours: string; theirs: string }[];
  texts: number;
  tokenMismatches: { text: string; ours: number[]; theirs: number[] }[];
  transformers: string;
}

/** Renders the corpus both ways for the model in `dir` (python: the torch venv's). */
export async function chatTemplateParity(dir: string, python: string): Promise<ChatParity> {
  const cases = chatCorpus();
  const tok = await loadTokenizer(dir);
  const work = mkdtempSync(join(tmpdir(), 'chat-parity-'));
  try {
    writeFileSync(join(work, 'cases.json'), JSON.stringify({ cases, texts: TOKENIZER_TEXTS }));
    execFileSync(python, [join(ROOT, 'scripts/checks/chat_templates.py'), dir, join(work, 'cases.json'), join(work, 'out.json')], {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, HF_HUB_OFFLINE: '1', TRANSFORMERS_VERBOSITY: 'error' },
    });
    const ref = JSON.parse(readFileSync(join(work, 'out.json'), 'utf8')) as { renders: (string | { error: string })[]; ids: number[][]; transformers: string };
    const mismatches: ChatParity['mismatches'] = [];
    cases.forEach((c, i) => {
      let ours: string;
      try {
        ours = tok.applyChatTemplate(c.messages, { addGenerationPrompt: c.addGenerationPrompt, ...(c.tools ? { tools: c.tools } : {}) });
      } catch (e) {
        ours = `{error} ${(e as Error).message}`;
      }
      const r = ref.renders[i]!;
      const theirs = typeof r === 'string' ? r : `{error} ${r.error}`;
      if (ours === theirs) return;
      let at = 0;
      while (at < ours.length && ours[at] === theirs[at]) at++;
      mismatches.push({ name: c.name, at, ours: ours.slice(Math.max(0, at - 40), at + 80), theirs: theirs.slice(Math.max(0, at - 40), at + 80) });
    });
    const tokenMismatches = TOKENIZER_TEXTS.map((text, i) => ({ text, ours: tok.encode(text), theirs: ref.ids[i]! })).filter(
      (m) => m.ours.length !== m.theirs.length || m.ours.some((x, j) => x !== m.theirs[j]),
    );
    return { cases: cases.length, mismatches, texts: TOKENIZER_TEXTS.length, tokenMismatches, transformers: ref.transformers };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
