// Edit mode's `TextEnvironment` (SWE-RL's single turn, docs/edit-mode.md): the prompt shows the issue and the oracle
// files cut to a token budget; the one reply is parsed into edits (lib/swe/edit-format.ts), applied to those files,
// and turned into a patch by git; the reward follows the config (lib/swe/edit-reward.ts), SWE-RL's own always
// reported beside it. The repository is read from the task's source tarball on the host when it has one (no container
// for a similarity reward), else from a sandbox of its image. Grading by tests runs in a fresh sandbox as agent mode's.
import { execFile } from 'node:child_process';
import { createGunzip } from 'node:zlib';
import { createReadStream } from 'node:fs';
import { mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import tar from 'tar-stream';
import type { Sandbox, SandboxBackend } from '../lib/sandbox.ts';
import { SandboxInfraError } from '../lib/sandbox.ts';
import type { ChatMessage, EndReason, EnvStep, TextEnvironment } from '../lib/types.ts';
import { filesInPatch, type SweTask } from '../lib/swe/task.ts';
import type { SweEnvConfig } from '../lib/swe/env-config.ts';
import { applyEdits, applySweRlEdits, parseEdits, pythonParses, type MalformedReason } from '../lib/swe/edit-format.ts';
import { buildEditContext, describeContext, localizedShare, type EditContext } from '../lib/swe/edit-context.ts';
import { editReward, type EditOutcome } from '../lib/swe/edit-reward.ts';
import { applyPatch, changeSimilarity, touchedLines } from '../lib/swe/similarity.ts';
import { editInstancePrompt, editSystemPrompt } from '../lib/swe/prompts.ts';
import { DIFF_CMD, filterPatch } from './sandbox/common.ts';
import { FailureType, nonRetryable } from '../lib/failures.ts';
import type { GradeFn } from './swe-env.ts';
import { GRADER_VERSION, gradePatch } from './grade.ts';

const run = promisify(execFile);

/** Where an edit episode reads the repository at its base commit and turns new file contents into a patch. */
export interface RepoWorkspace {
  /** path → content; null for a file that does not exist */
  read(paths: readonly string[]): Promise<Map<string, string | null>>;
  /** the `git diff` of the repository with `changes` (path → new content) written over it */
  patch(changes: ReadonlyMap<string, string>): Promise<string>;
  close(): Promise<void>;
}

const tarballFiles = new Map<string, Promise<Map<string, string | null>>>();

/** The files `paths` of a repository tarball (cached per tarball version: every sample of a task reads the same). */
async function readTarball(tarball: string, paths: readonly string[]): Promise<Map<string, string | null>> {
  const { mtimeMs, size } = await stat(tarball);
  const key = `${tarball}|${mtimeMs}|${size}|${paths.join('\u0000')}`;
  let p = tarballFiles.get(key);
  if (!p) {
    if (tarballFiles.size >= 256) tarballFiles.delete(tarballFiles.keys().next().value!);
    p = new Promise((resolve, reject) => {
      const found = new Map<string, string | null>(paths.map((x) => [x, null]));
      const extract = tar.extract();
      extract.on('entry', (header, stream, next) => {
        const name = header.name.replace(/^(\.\/)+/, '');
        if (header.type === 'file' && found.has(name)) {
          const parts: Buffer[] = [];
          stream.on('data', (c: unknown) => {
            parts.push(c as Buffer);
          });
          stream.on('end', () => {
            found.set(name, Buffer.concat(parts).toString('utf8'));
            next();
          });
        } else {
          stream.on('end', next);
          stream.resume();
        }
      });
      extract.on('finish', () => resolve(found));
      extract.on('error', reject);
      const src = createReadStream(tarball);
      src.on('error', reject);
      src.pipe(createGunzip()).on('error', reject).pipe(extract);
    });
    p.catch(() => tarballFiles.delete(key));
    tarballFiles.set(key, p);
  }
  return new Map(await p);
}

/** Git with no user or system configuration (the patch is the same on every host), identity given. */
async function git(cwd: string, cmd: string): Promise<string> {
  const env = {
    ...process.env,
    GIT_CONFIG_GLOBAL: '/dev/null',
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_AUTHOR_NAME: 'swerl',
    GIT_AUTHOR_EMAIL: 'swerl@localhost',
    GIT_COMMITTER_NAME: 'swerl',
    GIT_COMMITTER_EMAIL: 'swerl@localhost',
  };
  const { stdout } = await run('bash', ['-c', cmd], { cwd, env, maxBuffer: 64 << 20 });
  return stdout;
}

/** The repository of a task's source tarball, read on the host; patches from git in a scratch copy of the files involved. */
export function hostWorkspace(tarball: string, scratchGlobs: string[]): RepoWorkspace {
  let originals = new Map<string, string | null>();
  return {
    async read(paths) {
      originals = await readTarball(tarball, paths);
      return new Map(originals);
    },
    async patch(changes) {
      const dir = await mkdtemp(join(tmpdir(), 'swerl-edit-'));
      try {
        const put = async (p: string, text: string) => {
          await mkdir(dirname(join(dir, p)), { recursive: true });
          await writeFile(join(dir, p), text);
        };
        for (const [p, text] of originals) if (text !== null) await put(p, text);
        await git(dir, 'git init -q && git add -A && git commit -q --allow-empty --no-verify -m base');
        for (const [p, text] of changes) await put(p, text);
        return filterPatch(await git(dir, DIFF_CMD), scratchGlobs);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    },
    async close() {},
  };
}

/** The repository in a sandbox of the task's image (tasks without a tarball). */
export function sandboxWorkspace(start: () => Promise<Sandbox>, cfg: Pick<SweEnvConfig, 'scratchGlobs' | 'maxPatchBytes'>): RepoWorkspace {
  let box: Promise<Sandbox> | undefined;
  const sandbox = () => (box ??= start());
  return {
    async read(paths) {
      const s = await sandbox();
      const out = new Map<string, string | null>();
      for (const p of paths) {
        try {
          out.set(p, await s.readFile(`/testbed/${p}`));
        } catch (e) {
          if (e instanceof SandboxInfraError) throw e;
          out.set(p, null);
        }
      }
      return out;
    },
    async patch(changes) {
      const s = await sandbox();
      for (const [p, text] of changes) await s.writeFile(`/testbed/${p}`, text);
      return s.diff(cfg.scratchGlobs, { maxBytes: cfg.maxPatchBytes });
    },
    async close() {
      const s = box;
      box = undefined;
      if (s) await (await s).stop();
    },
  };
}

export interface SweEditDeps {
  workspace: RepoWorkspace;
  /** the sandbox backend grading runs on (tests and hybrid rewards, `gradeAlways`) */
  backend?: () => Promise<SandboxBackend>;
  grade?: GradeFn;
  /** grade every valid edit by tests, whatever the reward (an evaluation's pass@1) */
  gradeAlways?: boolean;
  /** tokens of a text in the policy's tokenizer (the context budget); default: 3 characters a token */
  countTokens?: (text: string) => number;
}

/** What a step found, kept for the reward. */
interface StepResult {
  outcome: EditOutcome;
  error?: string;
  patch: string;
  files: string[];
}

export class SweEditEnvironment implements TextEnvironment {
  private originals = new Map<string, string | null>();
  private oracle = new Map<string, string>();
  private context: EditContext | undefined;
  private result: StepResult | undefined;

  constructor(
    readonly task: SweTask,
    readonly cfg: SweEnvConfig,
    private readonly deps: SweEditDeps,
  ) {}

  async reset(): Promise<ChatMessage[]> {
    this.result = undefined;
    const paths = filesInPatch(this.task.patch);
    this.originals = await this.deps.workspace.read(paths);
    const applied = applyPatch(this.originals, this.task.patch);
    if (!applied.ok) throw nonRetryable(FailureType.InvalidTask, `task ${this.task.instance_id}: its gold patch does not apply to its repository (${applied.error})`);
    this.oracle = applied.contents;
    const countTokens = this.deps.countTokens ?? ((t: string) => Math.ceil(t.length / 3));
    const files = paths.map((path) => ({
      path,
      content: this.originals.get(path) ?? null,
      touched: [...touchedLines(this.originals.get(path) ?? '', this.oracle.get(path) ?? '')],
    }));
    this.context = await buildEditContext(files, this.cfg.edit.contextTokens, countTokens, { lineNumbers: this.cfg.edit.lineNumbers });
    const format = this.cfg.edit.format;
    return [
      { role: 'system', content: editSystemPrompt(format) },
      {
        role: 'user',
        content: editInstancePrompt({
          problemStatement: this.task.problem_statement,
          context: this.context.text,
          files: paths,
          format,
          example: this.cfg.edit.example,
          lineNumbers: this.cfg.edit.lineNumbers,
        }),
      },
    ];
  }

  /** The one turn: the reply becomes a patch, or a malformed outcome with its reason. The episode ends either way. */
  async step(reply: string): Promise<EnvStep> {
    const format = this.cfg.edit.format;
    const parsed = parseEdits(format, reply);
    const applied = parsed.ok ? await applyEdits(this.originals, parsed.edits) : parsed;
    // SWE-RL's own reward, whatever our rule: its application (every occurrence replaced) for its block formats; a block
    // that names no file is malformed there
    const unnamed = parsed.ok && parsed.edits.some((e) => e.path === '');
    const theirs =
      !parsed.ok || unnamed ? null : format === 'swe-rl' || format === 'search_replace' ? applySweRlEdits(this.originals, parsed.edits) : applied.ok ? applied.contents : null;
    const swerl = theirs ? changeSimilarity(this.originals, this.oracle, theirs).reward : -1;
    if (!applied.ok) {
      this.result = { outcome: { malformed: applied.reason, syntaxError: false, located: 0, swerl }, error: applied.error, patch: '', files: [] };
      return { observation: '', done: true, end: 'submitted', info: { editOutcome: applied.reason } };
    }
    let syntaxError = false;
    for (const [p, text] of applied.contents) {
      const before = this.originals.get(p);
      if (p.endsWith('.py') && before != null && !(await pythonParses(text)) && (await pythonParses(before))) syntaxError = true;
    }
    const patch = await this.deps.workspace.patch(applied.contents);
    const located = changeSimilarity(this.originals, this.oracle, applied.contents).located;
    const localized = await localizedShare(this.originals, this.oracle, applied.contents);
    this.result = { outcome: { malformed: null, syntaxError, located, localized, swerl }, patch, files: [...applied.contents.keys()] };
    return { observation: '', done: true, end: 'submitted', info: { editOutcome: 'valid' } };
  }

  async reward(end: EndReason): Promise<{ reward: number; info?: Record<string, unknown> }> {
    // a reply cut before it was acted on holds no edit
    const r: StepResult = this.result ?? {
      outcome: { malformed: 'no_block' as MalformedReason, syntaxError: false, located: 0, swerl: -1 },
      error: `the reply ended ${end} before it was read`,
      patch: '',
      files: [],
    };
    const kind = this.cfg.reward;
    const info: Record<string, unknown> = {
      instanceId: this.task.instance_id,
      end,
      steps: this.result ? 1 : 0,
      mode: 'edit',
      format: this.cfg.edit.format,
      rule: this.cfg.edit.rule,
      malformedScoring: this.cfg.edit.malformed,
      setting: this.context ? describeContext(this.context) : 'no context',
      editOutcome: r.outcome.malformed ?? 'valid',
      ...(r.error ? { editError: r.error } : {}),
      syntaxError: r.outcome.syntaxError,
      similarity: r.outcome.located,
      localized: r.outcome.localized ?? 0,
      swerlReward: r.outcome.swerl,
      patch: r.patch,
      reason: r.outcome.malformed ?? 'edit',
    };
    if (kind !== 'similarity') info.graderVersion = GRADER_VERSION;
    if (!r.outcome.malformed && (kind !== 'similarity' || this.deps.gradeAlways)) {
      const grade = this.deps.grade ?? gradePatch;
      if (!this.deps.backend) throw new Error('edit mode: grading by tests needs a sandbox backend');
      const g = await grade({ task: this.task, patch: r.patch, backend: await this.deps.backend(), timeoutS: this.cfg.gradeTimeoutS, limits: this.cfg.limits });
      const { reward: verdict, reason, ...rest } = g;
      r.outcome.resolved = verdict === 1;
      Object.assign(info, rest, { graderVersion: GRADER_VERSION, resolved: r.outcome.resolved, reason });
    }
    return { reward: editReward(kind, r.outcome, this.cfg.edit), info };
  }

  async close(): Promise<void> {
    await this.deps.workspace.close();
  }
}
