// Scripted agents with known outcomes: tool calls that reproduce a patch through file_editor (the gold
// replay of test/docker/swe-agent.test.ts), and an OpenAI-compatible chat server that plays such scripts as the
// "model" of an evaluation, so episodes take the real path (HTTP, episode loop, sandboxes, grading).
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parsePatch } from '../../lib/swe/similarity.ts';
import { formatToolCall, type ToolCall } from '../../lib/toolcall.ts';
import type { ServableModel } from '../../policy-server/index.ts';

const esc = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** file_editor calls that reproduce a git diff: `create` for new files, `insert` for pure additions, else `str_replace`. */
export function editCallsFromPatch(patch: string): ToolCall[] {
  const parsed = parsePatch(patch);
  assert.ok(parsed.ok, 'patch parses');
  const calls: ToolCall[] = [];
  const headers = [...patch.matchAll(/^(@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@.*)$/gm)].map((m) => Number(m[2]));
  let h = 0;
  for (const f of parsed.files) {
    const path = `/testbed/${f.newPath}`;
    const starts = headers.slice(h, h + f.hunks.length);
    h += f.hunks.length;
    const isNew = new RegExp(`^diff --git a/${esc(f.oldPath)} b/.*\\nnew file mode`, 'm').test(patch);
    if (isNew) {
      calls.push({
        name: 'file_editor',
        args: { command: 'create', path, file_text: f.hunks.flatMap((x) => x.filter((l) => l.startsWith('+')).map((l) => l.slice(1))).join('\n') },
      });
      continue;
    }
    // bottom-up, so that line numbers of the hunks above stay valid for `insert`
    for (let k = f.hunks.length - 1; k >= 0; k--) {
      const body = f.hunks[k]!.filter((l) => !l.startsWith('\\'));
      const oldLines = body.filter((l) => !l.startsWith('+')).map((l) => l.slice(1));
      const newLines = body.filter((l) => !l.startsWith('-')).map((l) => l.slice(1));
      const plus = body.map((l, i) => (l.startsWith('+') ? i : -1)).filter((i) => i >= 0);
      const contiguous = plus.length > 0 && plus.at(-1)! - plus[0]! + 1 === plus.length;
      if (!body.some((l) => l.startsWith('-')) && contiguous) {
        calls.push({ name: 'file_editor', args: { command: 'insert', path, insert_line: starts[k]! - 1 + plus[0]!, new_str: plus.map((i) => body[i]!.slice(1)).join('\n') } });
      } else {
        calls.push({ name: 'file_editor', args: { command: 'str_replace', path, old_str: oldLines.join('\n'), new_str: newLines.join('\n') } });
      }
    }
  }
  return calls;
}

export const FINISH: ToolCall = { name: 'finish', args: { command: 'submit' } };

/** The same edits in the R2E-Gym text format, each with a line of thought before it. */
export function editsFromPatch(patch: string): string[] {
  return editCallsFromPatch(patch).map((c) => `Let me edit.\n${formatToolCall(c)}`);
}

/** What the scripted model is asked: which task, which run, which turn of the episode. */
export interface ScriptContext {
  taskId: string;
  run: number;
  turn: number;
}

/** A turn of a script: a call (sent as text or as an OpenAI tool call) or plain text (no call). */
export type ScriptTurn = ToolCall | { text: string };

/** The context window the scripted model reports (large: its scripts never run out of room). */
export const SCRIPTED_CONTEXT_WINDOW = 1 << 20;

export interface ScriptedModelServer {
  url: string;
  /** requests per `${taskId}#${run}#${turn}` */
  requests: Map<string, number>;
  /** every request, in arrival order */
  log: (ScriptContext & { at: number })[];
  /** milliseconds each response waits (settable while running) */
  delayMs: number;
  close(): Promise<void>;
}

/**
 * An OpenAI-compatible `/v1/chat/completions` server playing scripts. `identify` maps a request's seed
 * (the episode loop derives it from the evaluation seed, task, run and turn) to the episode; `script`
 * gives that episode's turns. Tool calls come back as text (`<function=…>`, cut at a `stop` string as
 * a real server does) or, when the request has `tools`, as OpenAI tool calls.
 */
export async function startScriptedModel(opts: {
  identify: (seed: number) => ScriptContext | undefined;
  script: (ctx: Omit<ScriptContext, 'turn'>) => ScriptTurn[];
  delayMs?: number;
  /** answer every episode request with this HTTP status (a server that checks out, then fails) */
  failEpisodesWith?: number;
}): Promise<ScriptedModelServer> {
  const requests = new Map<string, number>();
  const log: ScriptedModelServer['log'] = [];
  const state = { delayMs: opts.delayMs ?? 0 };
  let n = 0;
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        // what a real server says of itself: its model and its context window (an evaluation checks both first)
        if (req.method === 'GET' && req.url === '/v1/models') {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ object: 'list', data: [{ id: 'scripted', object: 'model', max_model_len: SCRIPTED_CONTEXT_WINDOW }] }));
          return;
        }
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
          seed?: number;
          max_tokens?: number;
          messages: { content: string | null }[];
          tools?: unknown[];
          stop?: string[];
        };
        const promptTokens = Math.ceil(body.messages.reduce((s, m) => s + (m.content?.length ?? 0), 0) / 4);
        if (req.url === '/v1/chat/completions' && body.seed === undefined && body.max_tokens === 1) {
          // a request outside any episode (the evaluation's first check counts a prompt): one token back
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(
            JSON.stringify({
              id: `chatcmpl-${n++}`,
              object: 'chat.completion',
              model: 'scripted',
              choices: [{ index: 0, message: { role: 'assistant', content: 'I' }, finish_reason: 'length' }],
              usage: { prompt_tokens: promptTokens, completion_tokens: 1, total_tokens: promptTokens + 1 },
            }),
          );
          return;
        }
        const ctx = body.seed === undefined ? undefined : opts.identify(body.seed);
        if (req.url !== '/v1/chat/completions' || !ctx) {
          res.writeHead(400, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: { message: `scripted model: unknown request ${req.url} seed ${body.seed}` } }));
          return;
        }
        if (opts.failEpisodesWith) {
          res.writeHead(opts.failEpisodesWith, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: { message: `scripted model: failing with ${opts.failEpisodesWith} as told` } }));
          return;
        }
        const key = `${ctx.taskId}#${ctx.run}#${ctx.turn}`;
        requests.set(key, (requests.get(key) ?? 0) + 1);
        log.push({ ...ctx, at: Date.now() });
        if (state.delayMs) await new Promise((r) => setTimeout(r, state.delayMs));
        const turns = opts.script({ taskId: ctx.taskId, run: ctx.run });
        const turn: ScriptTurn = turns[ctx.turn] ?? FINISH;
        let content: string | null;
        let toolCalls: unknown[] | undefined;
        let finish = 'stop';
        if ('text' in turn) content = turn.text;
        else if (body.tools?.length) {
          content = 'Let me act.';
          toolCalls = [{ id: `call_${n++}`, type: 'function', function: { name: turn.name, arguments: JSON.stringify(turn.args) } }];
          finish = 'tool_calls';
        } else {
          content = `Let me act.\n${formatToolCall(turn)}`;
          for (const s of body.stop ?? []) {
            const at = content.indexOf(s);
            if (at >= 0) content = content.slice(0, at);
          }
        }
        const data = JSON.stringify({
          id: `chatcmpl-${n++}`,
          object: 'chat.completion',
          created: Math.floor(Date.now() / 1000),
          model: 'scripted',
          choices: [{ index: 0, message: { role: 'assistant', content, ...(toolCalls ? { tool_calls: toolCalls } : {}) }, finish_reason: finish, logprobs: null }],
          usage: { prompt_tokens: promptTokens, completion_tokens: Math.ceil((content?.length ?? 0) / 4) + 1, total_tokens: 0 },
        });
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) });
        res.end(data);
      })();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    log,
    get delayMs() {
      return state.delayMs;
    },
    set delayMs(v: number) {
      state.delayMs = v;
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/**
 * A policy-server model that plays a scripted turn where `turnFor` finds one in the prompt's text, and lets the
 * real checkpoint `real` answer everything else (the probe that verifies every weight sync among it). The scripted
 * tokens get log-prob -1 and are their own top 1 (rollouts ask for the top-1 log-prob).
 */
export function scriptedServable(
  real: ServableModel,
  tok: { decode(ids: number[], o: { skipSpecial: boolean }): string; encode(text: string): number[]; imEnd: number },
  turnFor: (prompt: string) => ToolCall | null,
): ServableModel {
  return {
    config: real.config,
    async generate(promptIds, opts) {
      const call = turnFor(tok.decode(Array.from(promptIds), { skipSpecial: false }));
      if (!call) return real.generate(promptIds, opts);
      const ids = Int32Array.from([...tok.encode(formatToolCall(call)), tok.imEnd]);
      const k = opts.topLogprobs ?? 0;
      const top = k > 0 ? { topIds: Int32Array.from({ length: ids.length * k }, (_, i) => ids[Math.floor(i / k)]!), topLogprobs: new Float32Array(ids.length * k).fill(-1) } : {};
      return { ids, logprobs: new Float32Array(ids.length).fill(-1), finishReason: 'stop' as const, ...top };
    },
    close: () => real.close(),
  };
}
