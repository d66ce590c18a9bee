// Verifying a task's answer-mutant canaries (lib/swe/answer-mutants.ts) once: in a fresh sandbox of the task
// image, test_patch is applied, the candidates of every FAIL_TO_PASS test are added beside their tests, the
// gold patch is applied, and test_cmd runs; a candidate that FAILED while its source test PASSED is kept.
// The result is cached per task (by the content of everything that decides it) on disk, outside the clone
// ($XDG_CACHE_HOME/swerl/canary-mutants), and in the process, so a task is verified once per host.
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { SandboxBackend } from '../lib/sandbox.ts';
import { GradingError } from '../lib/swe/grading.ts';
import { findTest, mutantCandidates, sha1, type MutantEdit, type VerifiedMutant } from '../lib/swe/answer-mutants.ts';
import { pythonParser } from '../lib/swe/python-outline.ts';
import { filesOfUnittestIds, filesOfTestIds } from '../lib/swe/runner-guard.ts';
import { runsPytest, sections, unittestAsNodeId, unittestIdCandidates, unittestIdLike } from '../lib/swe/grade-plan.ts';
import { logFormatOf, parseTestLog } from '../lib/swe/testlog.ts';
import type { SweTask } from '../lib/swe/task.ts';
import { shq } from '../lib/shell.ts';
import { ensureTaskImage } from './images.ts';

/** Bumped when the candidates or the check change: older cache entries are not read. */
const MUTANTS_VERSION = 2;
const VERIFY_TIMEOUT_S = 300;

export interface MutantVerification {
  /** the verified mutants (empty: the task's FAIL_TO_PASS tests admit none) */
  mutants: VerifiedMutant[];
  candidates: number;
  /** why none could be tried, when that is the case */
  note?: string;
  /** the gold run passed the time limit: nothing verified, and nothing cached (a busy host may be why) */
  timedOut?: boolean;
}

const memo = new Map<string, Promise<MutantVerification>>();

function cacheDir(): string {
  return join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'swerl', 'canary-mutants');
}

/** The cache key: everything that decides which mutants fail under gold. */
export function mutantsKey(task: SweTask): string {
  const parts = [MUTANTS_VERSION, task.instance_id, task.base_commit, task.image ?? task.source_tarball ?? '', task.patch, task.test_patch, task.FAIL_TO_PASS, task.test_cmd];
  return createHash('sha256').update(JSON.stringify(parts)).digest('hex').slice(0, 32);
}

/**
 * The task's verified answer-mutants (from the cache, or verified now, the gold run limited to `timeoutS`, the
 * grading's own test-run limit). A sandbox failure throws GradingError (infrastructure).
 */
export async function verifiedMutants(task: SweTask, backend: SandboxBackend, timeoutS = VERIFY_TIMEOUT_S): Promise<VerifiedMutant[]> {
  return (await mutantVerification(task, backend, timeoutS)).mutants;
}

export function mutantVerification(task: SweTask, backend: SandboxBackend, timeoutS = VERIFY_TIMEOUT_S): Promise<MutantVerification> {
  const key = mutantsKey(task);
  let p = memo.get(key);
  if (!p) {
    p = cachedOrVerified(task, backend, key, timeoutS);
    const forget = () => void memo.delete(key);
    p.then((v) => v.timedOut && forget(), forget);
    memo.set(key, p);
  }
  return p;
}

/** Where a task's verification is cached on this host. */
export const mutantsCacheFile = (task: SweTask): string => join(cacheDir(), `${mutantsKey(task)}.json`);

async function cachedOrVerified(task: SweTask, backend: SandboxBackend, key: string, timeoutS: number): Promise<MutantVerification> {
  const file = join(cacheDir(), `${key}.json`);
  try {
    return JSON.parse(await readFile(file, 'utf8')) as MutantVerification;
  } catch {
    // not verified on this host yet
  }
  const v = await verify(task, backend, Math.min(timeoutS, VERIFY_TIMEOUT_S));
  if (v.timedOut) return v;
  await mkdir(cacheDir(), { recursive: true });
  const tmp = `${file}.${randomBytes(4).toString('hex')}.tmp`;
  await writeFile(tmp, JSON.stringify(v));
  await rename(tmp, file);
  return v;
}

/** The FAIL_TO_PASS tests as node ids (file::[Class::]name) with the listed id each stands for, in the files that exist. */
function failToPassNodes(task: SweTask, files: ReadonlySet<string>): Map<string, string> {
  const out = new Map<string, string>();
  if (runsPytest(task.test_cmd)) {
    for (const id of task.FAIL_TO_PASS) out.set(id, id);
    return out;
  }
  for (const id of task.FAIL_TO_PASS) {
    const file = filesOfUnittestIds([id], files)[0];
    const node = file ? unittestAsNodeId(id, file) : undefined;
    if (node) out.set(node, id);
  }
  return out;
}

async function verify(task: SweTask, backend: SandboxBackend, timeoutS: number): Promise<MutantVerification> {
  if (!task.FAIL_TO_PASS.length || task.patch.trim() === '') return { mutants: [], candidates: 0, note: 'no FAIL_TO_PASS tests or no gold patch' };
  const pytest = runsPytest(task.test_cmd);
  const wanted = pytest ? filesOfTestIds(task.FAIL_TO_PASS) : unittestIdCandidates(task.FAIL_TO_PASS);
  const work = `/opt/swerl-mutants-${randomBytes(6).toString('hex')}`;
  const marker = `@@swerl-${randomBytes(6).toString('hex')}`;
  let sb;
  try {
    sb = await backend.start((await ensureTaskImage(task)).image, undefined, { 'swerl.purpose': 'grade', 'swerl.task': task.instance_id.slice(0, 63) });
  } catch (e) {
    throw new GradingError(task.instance_id, `verifying canary mutants: sandbox could not start: ${(e as Error).message}`);
  }
  try {
    const hasTest = task.test_patch.trim() !== '';
    await sb.copyIn(
      [...(hasTest ? [{ path: 'test.diff', content: task.test_patch }] : []), { path: 'gold.diff', content: task.patch.endsWith('\n') ? task.patch : `${task.patch}\n` }],
      work,
    );
    const read = [
      'set -e',
      'cd /testbed',
      ...(hasTest ? [`git apply --whitespace=nowarn ${work}/test.diff`] : []),
      ...wanted.map((f) => `if [ -f ${shq(f)} ]; then printf '\\n${marker} %s\\n' ${shq(f)}; cat ${shq(f)}; fi`),
      `printf '\\n${marker} end\\n'`,
    ].join('\n');
    const r = await sb.exec(read, 120, { maxOutputBytes: 64 << 20 });
    const files = sections(`\n${r.stdout}`, marker);
    if (!files.delete('end')) throw new Error(`reading the test files failed (exit ${r.exit}): ${(r.stdout + r.stderr).slice(-300)}`);
    const nodes = failToPassNodes(task, new Set(files.keys()));
    const planned = await plannedCandidates(files, nodes);
    if (!planned.candidates.length) return { mutants: [], candidates: 0, note: 'no assertion of a FAIL_TO_PASS test compares with a literal answer' };
    await sb.copyIn(
      [...planned.texts.values()].map((text, i) => ({ path: `file/${i}`, content: text })),
      work,
    );
    const setup = [
      'set -e',
      'cd /testbed',
      ...[...planned.texts.keys()].map((path, i) => `cat ${work}/file/${i} > ${shq(path)}`),
      `git apply --whitespace=nowarn ${work}/gold.diff`,
    ].join('\n');
    const s = await sb.exec(setup, 120);
    if (s.exit !== 0) return { mutants: [], candidates: planned.candidates.length, note: `the gold patch does not apply over test_patch (exit ${s.exit})` };
    const ids = planned.candidates.map((c) => c.id);
    // a test_cmd that names pytest ids runs the candidates only when they are named too
    const cmd = pytest && /::/.test(task.test_cmd) ? `${task.test_cmd} ${ids.map(shq).join(' ')}` : task.test_cmd;
    const run = await sb.exec(cmd, timeoutS, { maxOutputBytes: 16 << 20 });
    if (run.timedOut) return { mutants: [], candidates: planned.candidates.length, note: `the gold run passed ${timeoutS} s`, timedOut: true };
    const statuses = parseTestLog(run.stdout + (run.stderr ? `\n${run.stderr}` : ''), logFormatOf(task.test_cmd));
    const mutants = planned.candidates
      .filter((c) => statuses.get(c.id) === 'FAILED' && statuses.get(nodes.get(c.edit.source)!) === 'PASSED')
      .map((c) => ({ ...c.edit, path: c.path, sha: sha1(files.get(c.path)!) }));
    return { mutants, candidates: planned.candidates.length };
  } catch (e) {
    if (e instanceof GradingError) throw e;
    throw new GradingError(task.instance_id, `verifying canary mutants: ${(e as Error).message}`);
  } finally {
    await sb.stop().catch(() => undefined);
  }
}

interface Planned {
  /** per candidate: its file, edit, and its id in the run (as the log names it) */
  candidates: { path: string; edit: MutantEdit; id: string }[];
  /** the test files with every candidate added after its source test */
  texts: Map<string, string>;
}

/** Every candidate of every FAIL_TO_PASS test, each as its own test named test_swerl_mutant_<k> right after its source. */
async function plannedCandidates(files: ReadonlyMap<string, string>, nodes: ReadonlyMap<string, string>): Promise<Planned> {
  const out: Planned = { candidates: [], texts: new Map() };
  let k = 0;
  for (const [path, source] of files) {
    const edits = await mutantCandidates(path, source, [...nodes.keys()]);
    if (!edits.length) continue;
    const tree = (await pythonParser()).parse(source)!;
    const inserts: { at: number; text: string }[] = [];
    try {
      for (const edit of edits) {
        const parts = edit.source.split('::');
        const fn = findTest(tree.rootNode, parts.slice(1))!;
        const outer = fn.parent?.type === 'decorated_definition' ? fn.parent : fn;
        const lineStart = source.lastIndexOf('\n', outer.startIndex - 1) + 1;
        const nameNode = fn.childForFieldName('name')!;
        const name = `test_swerl_mutant_${k++}`;
        const cut = [
          { start: edit.start, end: edit.end, text: edit.text },
          { start: nameNode.startIndex, end: nameNode.endIndex, text: name },
        ].sort((a, b) => b.start - a.start);
        let text = source.slice(lineStart, fn.endIndex);
        for (const c of cut) text = text.slice(0, c.start - lineStart) + c.text + text.slice(c.end - lineStart);
        const nl = source.indexOf('\n', fn.endIndex);
        inserts.push({ at: nl < 0 ? source.length : nl + 1, text: `\n${text}\n` });
        const node = [...parts.slice(0, -1), name].join('::');
        const listed = nodes.get(edit.source)!;
        out.candidates.push({ path, edit, id: listed === edit.source ? node : unittestIdLike(listed, edit.source, node) });
      }
    } finally {
      tree.delete();
    }
    let text = source;
    for (const ins of inserts.sort((a, b) => b.at - a.at)) text = text.slice(0, ins.at) + ins.text + text.slice(ins.at);
    out.texts.set(path, text);
  }
  return out;
}
