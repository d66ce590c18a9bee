// The four R2E-Gym agent tools (DESIGN §3) over the one Sandbox interface: execute_bash, search,
// file_editor, finish. Commands run in the sandbox; the file-editing logic runs here on the host.
import { posix } from 'node:path';
import { z } from 'zod';
import { SandboxDiskLimitError, SandboxInfraError, type OmittedOutput, type Sandbox } from '../sandbox.ts';
import type { EndReason } from '../types.ts';
import type { ToolCall, ToolSchemas } from '../toolcall.ts';
import { CONDENSE_OVER_LINES, condensePython } from './python-outline.ts';
import { shq } from '../shell.ts';

export const REPO_ROOT = '/testbed';
export const DEFAULT_COMMAND_TIMEOUT_S = 90;
/** observations (file views, search results, command output) are clipped at this many characters */
export const MAX_OBSERVATION_CHARS = 10_000;
/** long command output keeps this many lines from the start and from the end */
export const KEEP_LINES = 40;
export const MAX_SEARCH_FILES = 100;
/** file_editor reads and rewrites whole files: larger ones are refused with an observation */
export const MAX_EDIT_BYTES = 8 << 20;
/** execute_bash captures at most this much of each stream: the head and, of it, the last TAIL_BYTES */
export const CAPTURE_BYTES = 1 << 20;
export const TAIL_BYTES = 256 << 10;
export const BLOCKED_COMMANDS = ['git', 'ipython', 'jupyter', 'nohup'] as const;

const intLike = z.preprocess((v) => (typeof v === 'string' && v.trim() !== '' ? Number(v.trim()) : v), z.number().int());

const boolLike = z.preprocess((v) => (typeof v === 'string' && /^(true|false)$/i.test(v.trim()) ? v.trim().toLowerCase() === 'true' : v), z.boolean());

const viewRange = z.preprocess(
  (v) => {
    if (typeof v !== 'string') return v;
    const s = v.trim();
    try {
      return JSON.parse(s.startsWith('[') ? s : `[${s}]`);
    } catch {
      return s;
    }
  },
  z.tuple([z.number().int(), z.number().int()]),
);

export const ExecuteBashArgs = z.object({ cmd: z.string().min(1, 'must not be empty') });
export const SearchArgs = z.object({ search_term: z.string().min(1, 'must not be empty'), path: z.string().optional() });
export const FileEditorArgs = z.object({
  command: z.enum(['view', 'create', 'str_replace', 'insert', 'undo_edit']),
  path: z.string().min(1, 'must not be empty'),
  file_text: z.string().optional(),
  view_range: viewRange.optional(),
  old_str: z.string().optional(),
  new_str: z.string().optional(),
  insert_line: intLike.optional(),
  /** `view` of a .py file: the condensed view (long function bodies elided); default for files over 150 lines */
  concise: boolLike.optional(),
});
export const FinishArgs = z.object({ command: z.string().optional(), result: z.string().optional() });

/** Argument schemas of the four tools, for `parseToolCall(text, { tools: SWE_TOOL_SCHEMAS, aliases: SWE_TOOL_ALIASES })`. */
export const SWE_TOOL_SCHEMAS: ToolSchemas = {
  execute_bash: ExecuteBashArgs,
  search: SearchArgs,
  file_editor: FileEditorArgs,
  finish: FinishArgs,
};

/** Names other R2E-Gym / SWE-agent prompts use for the same tools. */
export const SWE_TOOL_ALIASES: Record<string, string> = {
  str_replace_editor: 'file_editor',
  bash: 'execute_bash',
  submit: 'finish',
};

export interface ToolResult {
  observation: string;
  /** set when the call ends the episode (`submitted`) or must end it (`env_timeout`) */
  end?: EndReason;
  /** why it ended the episode, when that is not plain (`{reason, error}`) */
  info?: Record<string, unknown>;
}

export interface SweToolsOptions {
  /** per-command limit of execute_bash, seconds */
  commandTimeoutS?: number;
  /** wall-clock deadline of the episode (ms since epoch); commands are capped by the time left */
  deadlineMs?: number;
  maxObservationChars?: number;
  /** clock, for tests */
  now?: () => number;
}

/** Clips `text` at `max` characters with a note saying how much was cut. */
export function clip(text: string, max = MAX_OBSERVATION_CHARS, hint = ''): string {
  if (text.length <= max) return text;
  return `${text.slice(0, max)}\n<response clipped: ${text.length - max} more characters not shown${hint ? `; ${hint}` : ''}>`;
}

/** Keeps the first and last `keep` lines of long output, with a note of how many were left out. */
export function headTail(text: string, keep = KEEP_LINES): string {
  const lines = text.split('\n');
  if (lines.length <= 2 * keep) return text;
  const omitted = lines.length - 2 * keep;
  return [...lines.slice(0, keep), `<... ${omitted} lines omitted ...>`, ...lines.slice(-keep)].join('\n');
}

/**
 * One output stream for an observation: its first and last `keep` lines, clipped at `max` characters. When the
 * capture itself left a middle part out (`omitted`), the notes count it too, so they say what the command
 * really printed (200 MB of output is not "1 MB more").
 */
export function formatStream(text: string, omitted: OmittedOutput | undefined, max: number, keep = KEEP_LINES): string {
  if (!omitted) return clip(headTail(text), max);
  const head = text.slice(0, omitted.at).split('\n');
  const tail = text.slice(omitted.at).split('\n');
  const shownHead = head.slice(0, keep);
  const shownTail = tail.slice(-keep);
  const newlines = text.split('\n').length - 1 + omitted.lines;
  const lines = newlines + (text.endsWith('\n') ? 0 : 1) - shownHead.length - shownTail.length;
  const total = text.length + omitted.bytes;
  const shown = [...shownHead, ...shownTail].join('\n').length;
  const body = [...shownHead, `<... ${lines} lines (${total - shown} characters) omitted ...>`, ...shownTail].join('\n');
  if (body.length <= max) return body;
  return `${body.slice(0, max)}\n<response clipped: ${total - max} more characters not shown>`;
}

/** `cat -n` style numbering from line `first` (1-based). */
export function numberLines(lines: string[], first = 1): string {
  return lines.map((l, k) => numberedLine(first + k, l)).join('\n');
}

/** One line as the views print it (`cat -n`): the 1-based number right-aligned in 6, a tab, the text. */
function numberedLine(n: number, text: string): string {
  return `${String(n).padStart(6)}\t${text}`;
}

/** Splits file text into lines, remembering whether it ended with a newline. */
function splitLines(text: string): { lines: string[]; trailingNewline: boolean } {
  if (text === '') return { lines: [], trailingNewline: false };
  const trailingNewline = text.endsWith('\n');
  const lines = (trailingNewline ? text.slice(0, -1) : text).split('\n');
  return { lines, trailingNewline };
}

function joinLines(lines: string[], trailingNewline: boolean): string {
  return lines.length === 0 ? '' : lines.join('\n') + (trailingNewline ? '\n' : '');
}

/** First word of a command line, ignoring leading `VAR=value` assignments and a path prefix. */
export function firstCommandWord(cmd: string): string {
  const words = cmd.trim().split(/\s+/);
  let k = 0;
  while (k < words.length && /^[A-Za-z_][A-Za-z0-9_]*=/.test(words[k]!)) k++;
  const w = (words[k] ?? '').replace(/^[({]+/, '');
  return posix.basename(w);
}

/** Resolves a model-given path inside /testbed; null when it points outside. */
export function resolveRepoPath(p: string): string | null {
  const trimmed = p.trim();
  if (trimmed === '' || trimmed.includes('\0')) return null;
  const abs = posix.normalize(trimmed.startsWith('/') ? trimmed : posix.join(REPO_ROOT, trimmed));
  const clean = abs.length > 1 && abs.endsWith('/') ? abs.slice(0, -1) : abs;
  if (clean !== REPO_ROOT && !clean.startsWith(`${REPO_ROOT}/`)) return null;
  return clean;
}

type PathKind = 'file' | 'dir' | 'none' | 'other';

function errorText(e: unknown): string {
  return (e as Error)?.message ?? String(e);
}

/**
 * The tools of one episode over one sandbox. `run` never throws for the model's mistakes: they come back
 * as observations. Infrastructure failures (the sandbox is gone) do throw.
 */
export class SweTools {
  private readonly history = new Map<string, (string | null)[]>();
  private readonly commandTimeoutS: number;
  private readonly maxChars: number;
  private readonly now: () => number;

  constructor(
    private readonly sandbox: Sandbox,
    private readonly opts: SweToolsOptions = {},
  ) {
    this.commandTimeoutS = opts.commandTimeoutS ?? DEFAULT_COMMAND_TIMEOUT_S;
    this.maxChars = opts.maxObservationChars ?? MAX_OBSERVATION_CHARS;
    this.now = opts.now ?? Date.now;
  }

  /**
   * Runs an already validated call (see `SWE_TOOL_SCHEMAS`). A failure of the sandbox or its backend
   * (SandboxInfraError) propagates: the rollout is retried (DESIGN §2). Any other failure is the agent's
   * (a file it made unreadable, a .git it removed) and comes back as an observation; a sandbox the agent
   * lost by writing past its disk limit ends the episode with `error`.
   */
  async run(call: ToolCall): Promise<ToolResult> {
    for (const [k, v] of Object.entries(call.args)) {
      if (typeof v === 'string' && v.includes('\0')) return { observation: `ERROR: Parameter \`${k}\` contains a NUL character.` };
    }
    try {
      return await this.runTool(call);
    } catch (e) {
      if (e instanceof SandboxInfraError) throw e;
      if (e instanceof SandboxDiskLimitError) {
        return { observation: `ERROR: ${e.message}. The sandbox is gone; the episode ends.`, end: 'error', info: { reason: 'disk_limit', error: e.message } };
      }
      return { observation: `ERROR: ${call.name} failed: ${errorText(e)}` };
    }
  }

  private async runTool(call: ToolCall): Promise<ToolResult> {
    switch (call.name) {
      case 'execute_bash':
        return this.executeBash(ExecuteBashArgs.parse(call.args).cmd);
      case 'search': {
        const a = SearchArgs.parse(call.args);
        return { observation: await this.search(a.search_term, a.path ?? '.') };
      }
      case 'file_editor':
        return { observation: await this.fileEditor(FileEditorArgs.parse(call.args)) };
      case 'finish':
        return { observation: '<<< Finished >>>', end: 'submitted' };
      default:
        return { observation: `ERROR: Unknown function \`${call.name}\`. Available functions: execute_bash, search, file_editor, finish.` };
    }
  }

  /**
   * `execute_bash`: runs in /testbed under `timeout` at min(per-command limit, time left in the episode).
   * Observation: `[STDOUT]\n<out>\n[STDERR]\n<err>` (each stream cut to its first and last 40 lines), then
   * `[EXIT CODE] n` when not 0. A command killed at the per-command limit is reported and the episode goes on;
   * one killed because the episode's time ran out ends it with `env_timeout`.
   */
  async executeBash(cmd: string): Promise<ToolResult> {
    const word = firstCommandWord(cmd);
    if ((BLOCKED_COMMANDS as readonly string[]).includes(word)) {
      return {
        observation: `ERROR: The command \`${word}\` is not allowed in this environment. Use the other tools (file_editor, search) or plain shell commands instead.`,
      };
    }
    let limit = this.commandTimeoutS;
    let cappedByEpisode = false;
    if (this.opts.deadlineMs !== undefined) {
      const left = Math.floor((this.opts.deadlineMs - this.now()) / 1000);
      if (left <= 0) return { observation: 'ERROR: The time for this episode is up.', end: 'env_timeout' };
      if (left < limit) {
        limit = left;
        cappedByEpisode = true;
      }
    }
    // the sandbox runs it under `timeout`, which kills the command's whole process group at the limit
    const r = await this.sandbox.exec(cmd, limit, { cwd: REPO_ROOT, maxOutputBytes: CAPTURE_BYTES, tailBytes: TAIL_BYTES });
    if (r.diskLimitExceeded) {
      return {
        observation: `ERROR: The sandbox reached its disk limit: writes past it fail or stop the command. Delete large files you created (rm) before going on.\n${clip(this.formatStreams(r.stdout, r.stderr, r.omitted), this.maxChars)}`,
      };
    }
    if (r.timedOut) {
      const out = this.formatStreams(r.stdout, r.stderr, r.omitted);
      if (cappedByEpisode) {
        return { observation: `ERROR: The command ran past the time left in this episode (${limit} s) and was killed.\n${out}`, end: 'env_timeout' };
      }
      return { observation: `ERROR: The command took longer than ${limit} seconds and was killed. Try a faster command or a smaller input.\n${out}` };
    }
    let obs = this.formatStreams(r.stdout, r.stderr, r.omitted);
    if (r.exit !== 0) obs += `\n[EXIT CODE] ${r.exit}`;
    return { observation: clip(obs, this.maxChars) };
  }

  private formatStreams(stdout: string, stderr: string, omitted?: { stdout?: OmittedOutput; stderr?: OmittedOutput }): string {
    const half = Math.floor(this.maxChars / 2);
    // a trailing newline is not a line of its own (only when nothing was left out after it)
    const trim = (t: string, o?: OmittedOutput) => (o && o.at >= t.length ? t : t.replace(/\n$/, ''));
    const out = formatStream(trim(stdout, omitted?.stdout), omitted?.stdout, half);
    const err = formatStream(trim(stderr, omitted?.stderr), omitted?.stderr, half);
    return `[STDOUT]\n${out}\n[STDERR]\n${err}`;
  }

  private async pathKind(abs: string): Promise<PathKind> {
    return (await this.pathInfo(abs)).kind;
  }

  /** What `abs` is, and a file's size in bytes. */
  private async pathInfo(abs: string): Promise<{ kind: PathKind; bytes: number }> {
    const r = await this.sandbox.exec(
      `if [ -d ${shq(abs)} ]; then echo dir; elif [ -f ${shq(abs)} ]; then echo file $(stat -L -c %s ${shq(abs)}); elif [ -e ${shq(abs)} ]; then echo other; else echo none; fi`,
      30,
    );
    const [k, size] = r.stdout.trim().split(' ');
    const kind: PathKind = k === 'dir' || k === 'file' || k === 'other' ? k : 'none';
    return { kind, bytes: Number(size) || 0 };
  }

  /**
   * `search`: literal (fixed-string) match. In a file: `grep -n` lines. In a directory: the files with their match
   * counts (hidden files and directories skipped); more than 100 files asks the model to narrow the search.
   */
  async search(term: string, path: string): Promise<string> {
    const abs = resolveRepoPath(path);
    if (!abs) return `ERROR: The path \`${path}\` is outside the repository; use a path under ${REPO_ROOT}.`;
    const kind = await this.pathKind(abs);
    if (kind === 'none') return `ERROR: The path \`${abs}\` does not exist.`;
    if (kind === 'file') {
      const r = await this.sandbox.exec(`grep -n -F -e ${shq(term)} -- ${shq(abs)}`, 60);
      if (r.exit > 1) return `ERROR: grep failed: ${r.stderr.trim()}`;
      const lines = r.stdout.split('\n').filter((l) => l !== '');
      if (lines.length === 0) return `No matches found for "${term}" in ${abs}`;
      return clip(`Matches for "${term}" in ${abs}:\n${lines.join('\n')}`, this.maxChars, 'narrow the search term');
    }
    const r = await this.sandbox.exec(`grep -r -I -c -F --exclude-dir='.?*' --exclude='.?*' -e ${shq(term)} -- . 2>/dev/null | grep -v ':0$'`, 60, { cwd: abs });
    const rows = r.stdout
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => {
        const c = l.lastIndexOf(':');
        return { file: l.slice(0, c), count: Number(l.slice(c + 1)) };
      })
      .sort((a, b) => a.file.localeCompare(b.file));
    if (rows.length === 0) return `No matches found for "${term}" in ${abs}`;
    if (rows.length > MAX_SEARCH_FILES) {
      return `More than ${MAX_SEARCH_FILES} files matched for "${term}" in ${abs} (${rows.length} files). Please narrow your search.`;
    }
    const total = rows.reduce((s, x) => s + x.count, 0);
    const body = rows.map((x) => `${x.file} (${x.count} matches)`).join('\n');
    return clip(`Found ${total} matches for "${term}" in ${abs}:\n${body}\nEnd of matches for "${term}" in ${abs}`, this.maxChars);
  }

  /** `file_editor`: view / create / str_replace / insert / undo_edit on paths under /testbed. */
  async fileEditor(a: z.infer<typeof FileEditorArgs>): Promise<string> {
    const abs = resolveRepoPath(a.path);
    if (!abs) return `ERROR: The path \`${a.path}\` is outside the repository; use an absolute path under ${REPO_ROOT}.`;
    const out = await this.edit(a, abs);
    return clip(out, this.maxChars, 'use `view_range` to see a part of the file');
  }

  private async edit(a: z.infer<typeof FileEditorArgs>, abs: string): Promise<string> {
    const { kind, bytes } = await this.pathInfo(abs);
    if (kind === 'file' && bytes > MAX_EDIT_BYTES && a.command !== 'create' && a.command !== 'undo_edit') {
      return `ERROR: \`${abs}\` holds ${bytes} bytes; file_editor works on files up to ${MAX_EDIT_BYTES} bytes. Use execute_bash (head, sed -n, grep) on it instead.`;
    }
    switch (a.command) {
      case 'view':
        if (kind === 'dir') {
          if (a.view_range) return 'ERROR: `view_range` is not allowed when `path` is a directory.';
          return this.viewDir(abs);
        }
        if (kind !== 'file') return `ERROR: The path \`${abs}\` does not exist.`;
        return this.viewFile(abs, a.view_range, a.concise);
      case 'create': {
        if (a.file_text === undefined) return 'ERROR: Parameter `file_text` is required for command `create`.';
        if (kind !== 'none') return `ERROR: \`${abs}\` already exists; \`create\` cannot overwrite it. Use \`str_replace\` or \`insert\` to edit it.`;
        const mk = await this.sandbox.exec(`mkdir -p ${shq(posix.dirname(abs))}`, 30);
        if (mk.exit !== 0) return `ERROR: Could not create the directory of \`${abs}\`: ${mk.stderr.trim()}`;
        // a text file ends with a newline (the call format eats the one before `</parameter>`)
        const content = a.file_text === '' || a.file_text.endsWith('\n') ? a.file_text : `${a.file_text}\n`;
        await this.sandbox.writeFile(abs, content);
        this.pushHistory(abs, null);
        return `File created successfully at: ${abs}`;
      }
      case 'str_replace': {
        if (kind !== 'file') return kind === 'dir' ? `ERROR: \`${abs}\` is a directory.` : `ERROR: The path \`${abs}\` does not exist.`;
        if (a.old_str === undefined) return 'ERROR: Parameter `old_str` is required for command `str_replace`.';
        if (a.old_str === '') return 'ERROR: `old_str` must not be empty.';
        const text = await this.sandbox.readFile(abs);
        const at = occurrences(text, a.old_str);
        if (at.length === 0) return `ERROR: No replacement was performed: \`old_str\` did not appear verbatim in ${abs}.`;
        if (at.length > 1) {
          const lines = [...new Set(at.map((o) => lineOf(text, o)))];
          return `ERROR: No replacement was performed: \`old_str\` occurs ${at.length} times in ${abs}, at lines ${lines.join(', ')}. Include more context so that it is unique.`;
        }
        const newStr = a.new_str ?? '';
        const updated = text.slice(0, at[0]) + newStr + text.slice(at[0]! + a.old_str.length);
        await this.sandbox.writeFile(abs, updated);
        this.pushHistory(abs, text);
        const first = lineOf(updated, at[0]!);
        return `The file ${abs} has been edited. ${this.snippet(updated, first, first + newStr.split('\n').length - 1)}\nReview the changes and make sure they are as expected. Edit the file again if necessary.`;
      }
      case 'insert': {
        if (kind !== 'file') return kind === 'dir' ? `ERROR: \`${abs}\` is a directory.` : `ERROR: The path \`${abs}\` does not exist.`;
        if (a.insert_line === undefined) return 'ERROR: Parameter `insert_line` is required for command `insert`.';
        if (a.new_str === undefined) return 'ERROR: Parameter `new_str` is required for command `insert`.';
        const text = await this.sandbox.readFile(abs);
        const { lines, trailingNewline } = splitLines(text);
        const n = a.insert_line;
        if (n < 0 || n > lines.length) {
          return `ERROR: Invalid \`insert_line\` ${n}: it should be within the range of lines of the file: [0, ${lines.length}].`;
        }
        const added = a.new_str.endsWith('\n') ? a.new_str.slice(0, -1).split('\n') : a.new_str.split('\n');
        const next = [...lines.slice(0, n), ...added, ...lines.slice(n)];
        const updated = joinLines(next, trailingNewline || lines.length === 0);
        await this.sandbox.writeFile(abs, updated);
        this.pushHistory(abs, text);
        return `The file ${abs} has been edited. ${this.snippet(updated, n + 1, n + added.length)}\nReview the changes and make sure they are as expected (correct indentation, no duplicate lines). Edit the file again if necessary.`;
      }
      case 'undo_edit': {
        const h = this.history.get(abs);
        if (!h || h.length === 0) return `ERROR: No edit history found for ${abs}.`;
        const prev = h.pop()!;
        if (prev === null) {
          await this.sandbox.exec(`rm -f ${shq(abs)}`, 30);
          return `Last edit to ${abs} undone: the file created there was removed.`;
        }
        await this.sandbox.writeFile(abs, prev);
        return `Last edit to ${abs} undone successfully. ${this.snippet(prev, 1, Math.min(splitLines(prev).lines.length, 40))}`;
      }
    }
  }

  private pushHistory(abs: string, previous: string | null): void {
    const h = this.history.get(abs) ?? [];
    h.push(previous);
    this.history.set(abs, h);
  }

  /** Numbered lines [from-4, to+4] of `text`. */
  private snippet(text: string, from: number, to: number): string {
    const { lines } = splitLines(text);
    const a = Math.max(1, from - 4);
    const b = Math.min(lines.length, Math.max(to, from) + 4);
    return `Here is a snippet of the edited file (lines ${a}-${b}):\n${numberLines(lines.slice(a - 1, b), a)}`;
  }

  private async viewFile(abs: string, range?: [number, number], concise?: boolean): Promise<string> {
    const text = await this.sandbox.readFile(abs);
    const { lines } = splitLines(text);
    const n = lines.length;
    if (range) {
      const [start, endRaw] = range;
      if (start < 1 || start > Math.max(n, 1)) {
        return `ERROR: Invalid \`view_range\` [${start}, ${endRaw}]: the first element should be within the range of lines of the file: [1, ${n}].`;
      }
      const end = endRaw === -1 ? n : endRaw;
      if (end > n) return `ERROR: Invalid \`view_range\` [${start}, ${endRaw}]: the second element ${endRaw} should not be greater than the number of lines in the file: ${n}.`;
      if (end < start) return `ERROR: Invalid \`view_range\` [${start}, ${endRaw}]: the second element should be -1 or at least the first element ${start}.`;
      range = [start, end];
    }
    // R2E-Gym's default: a whole .py file over 150 lines is shown condensed; `concise` asks for it (or not)
    const condense = abs.endsWith('.py') && (concise ?? (!range && n > CONDENSE_OVER_LINES));
    const rows = condense ? await condensePython(text) : null;
    if (rows) {
      const shown = range ? rows.filter((r) => r.line >= range[0] && r.line <= range[1]) : rows;
      const span = range ? ` (lines ${range[0]}-${range[1]})` : '';
      const body = shown.map((r) => numberedLine(r.line, r.text)).join('\n');
      return `Here is a condensed view of ${abs}${span}: function bodies over 3 lines and long class docstrings are elided. Use \`view_range\` to see the elided lines.\n${body}\n`;
    }
    if (!range) return `Here's the result of running \`cat -n\` on ${abs}:\n${numberLines(lines)}\n`;
    return `Here's the result of running \`cat -n\` on ${abs} (lines ${range[0]}-${range[1]}):\n${numberLines(lines.slice(range[0] - 1, range[1]), range[0])}\n`;
  }

  private async viewDir(abs: string): Promise<string> {
    const r = await this.sandbox.exec(`find . -mindepth 1 -maxdepth 2 -name '.*' -prune -o -print | sort`, 30, { cwd: abs });
    if (r.exit !== 0) return `ERROR: Could not list ${abs}: ${r.stderr.trim()}`;
    const entries = r.stdout
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => posix.join(abs, l));
    return `Here are the files and directories up to 2 levels deep in ${abs}, excluding hidden items:\n${abs}\n${entries.join('\n')}\n`;
  }
}

function occurrences(text: string, needle: string): number[] {
  const at: number[] = [];
  for (let i = text.indexOf(needle); i >= 0; i = text.indexOf(needle, i + 1)) at.push(i);
  return at;
}

/** 1-based line number of character offset `off`. */
function lineOf(text: string, off: number): number {
  let n = 1;
  for (let i = text.indexOf('\n'); i >= 0 && i < off; i = text.indexOf('\n', i + 1)) n++;
  return n;
}
