// One validation lane of the task factory (issue 28): a sandbox of the repository's image (the same backends
// and limits as grading) that runs the test command many times, each time with some files replaced (a bug,
// a wrong fix) and then put back (`git checkout` + `git clean`), so that a container is started once per
// lane, not once per run. Per-test results come from the factory's pytest plugin
// (activities/swerl_factory_pytest.py), installed outside /testbed. A sandbox that dies is infrastructure:
// the lane starts a new one and the run is tried again; it never becomes a verdict on the candidate.
import { readFileSync } from 'node:fs';
import { SandboxInfraError, type Sandbox, type SandboxBackend, type SandboxLimits } from '../../lib/sandbox.ts';
import type { TestFailure } from '../../lib/factory/problem.ts';
import type { TestOutcome } from '../../lib/swe/grading.ts';
import { shq } from '../../lib/shell.ts';

const PLUGIN = readFileSync(new URL('../swerl_factory_pytest.py', import.meta.url), 'utf8');
const PLUGIN_MODULE = 'swerl_factory_pytest';
const STAGE = '/tmp/swerl-factory';
/** restarts of a dead sandbox for one run before the activity gives up (and Temporal retries it) */
const RUN_ATTEMPTS = 3;

export interface TestRecord {
  outcome: TestOutcome;
  seconds: number;
  /** the call ran past its limit (RunOptions.testLimits) and was stopped */
  timedOut?: boolean;
  failure?: TestFailure;
  /** indices into RunResult.functions (coverage runs) */
  covered?: number[];
}

export interface RunResult {
  exit: number;
  timedOut: boolean;
  seconds: number;
  tests: Map<string, TestRecord>;
  collectErrors: { nodeid: string; failure: TestFailure }[];
  /** coverage runs: the code objects seen (file, first line) */
  functions: { file: string; line: number }[];
  logTail: string;
}

export interface RunOptions {
  /** files to put in place for this run (repository path → text); put back after it */
  files?: Readonly<Record<string, string>>;
  /** only these node ids, in this order (the plugin does not even import other test files) */
  select?: readonly string[];
  /** stop at the first failure */
  stopAtFirst?: boolean;
  /** record the functions each test calls */
  cover?: boolean;
  /** per-test limits of a call, seconds (`*`: the default): a test past it fails and is marked timedOut */
  testLimits?: Readonly<Record<string, number>>;
  timeoutS: number;
}

/** Parses the plugin's JSON lines. */
export function parsePluginOutput(text: string): Pick<RunResult, 'tests' | 'collectErrors' | 'functions'> {
  const tests = new Map<string, TestRecord>();
  const collectErrors: RunResult['collectErrors'] = [];
  const functions: RunResult['functions'] = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith('{')) continue;
    let o: Record<string, unknown>;
    try {
      o = JSON.parse(line) as Record<string, unknown>;
    } catch {
      continue;
    }
    if (typeof o.t === 'string') {
      const rec: TestRecord = { outcome: o.o as TestOutcome, seconds: Number(o.d) || 0 };
      if (o.f) rec.failure = o.f as TestFailure;
      if (Array.isArray(o.c)) rec.covered = o.c as number[];
      if (o.to) rec.timedOut = true;
      tests.set(o.t, rec);
    } else if (typeof o.fn === 'number') functions[o.fn] = { file: String(o.file), line: Number(o.line) };
    else if (typeof o.collect_error === 'string') collectErrors.push({ nodeid: o.collect_error, failure: o.f as TestFailure });
  }
  return { tests, collectErrors, functions };
}

export class Lane {
  private sb: Sandbox | null = null;
  private runs = 0;
  /** CPU seconds of the sandboxes this lane closed (their cgroups) */
  cpuSeconds = 0;

  constructor(
    private readonly backend: SandboxBackend,
    private readonly image: string,
    readonly testCmd: string,
    private readonly limits: Partial<SandboxLimits> | undefined,
    private readonly labels: Record<string, string>,
  ) {}

  private async sandbox(): Promise<Sandbox> {
    if (this.sb) return this.sb;
    const sb = await this.backend.start(this.image, this.limits, { 'swerl.purpose': 'factory', ...this.labels });
    try {
      // the plugin goes into the interpreter's first site directory: importable whatever PYTHONPATH test_cmd sets
      const r = await sb.exec(`python3 -c "import site,sys; print((site.getsitepackages() or [sys.prefix])[0])"`, 60);
      const site = r.stdout.trim().split('\n').at(-1) ?? '';
      if (r.exit !== 0 || !site.startsWith('/')) throw new Error(`no python3 site directory in ${this.image} (exit ${r.exit}): ${(r.stdout + r.stderr).slice(-300)}`);
      await sb.copyIn([{ path: `${PLUGIN_MODULE}.py`, content: PLUGIN }], site);
    } catch (e) {
      await sb.stop().catch(() => undefined);
      throw e;
    }
    this.sb = sb;
    return sb;
  }

  /** `fn` on the lane's sandbox; a sandbox that dies is replaced and `fn` tried again. */
  private async onSandbox<T>(fn: (sb: Sandbox) => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await fn(await this.sandbox());
      } catch (e) {
        if (!(e instanceof SandboxInfraError) || attempt >= RUN_ATTEMPTS) throw e;
        await this.drop();
      }
    }
  }

  /** Stages `files` (and `extra` beside them) in a fresh directory; returns it. */
  private async stage(sb: Sandbox, files: Readonly<Record<string, string>> | undefined, extra: { path: string; content: string }[]): Promise<string> {
    const dir = `${STAGE}/${++this.runs}`;
    await sb.copyIn([...Object.entries(files ?? {}).map(([p, content]) => ({ path: `files/${p}`, content })), ...extra], dir);
    return dir;
  }

  /** The work tree as the image has it, whatever a run or the staged files changed; the stage removed. */
  private static restore(dir: string): string {
    return `cd /testbed && git reset -q && git checkout -q -- . && git clean -fdq && rm -rf .pytest_cache ${shq(dir)}`;
  }

  /** Runs the test command once (with `files` in place, then put back). */
  run(o: RunOptions): Promise<RunResult> {
    return this.onSandbox((sb) => this.runOnce(sb, o));
  }

  /** The git commit of the tree with `files` in place: no parent, the given identity and date (so the id depends on the tree alone). */
  commitOf(files: Readonly<Record<string, string>>, who: { name: string; email: string; date: string; message: string }): Promise<string> {
    return this.onSandbox(async (sb) => {
      const dir = await this.stage(sb, files, []);
      const env = ['AUTHOR', 'COMMITTER'].map((r) => `GIT_${r}_NAME=${shq(who.name)} GIT_${r}_EMAIL=${shq(who.email)} GIT_${r}_DATE=${shq(who.date)}`).join(' ');
      const r = await sb.exec(
        [
          `cd /testbed && cp -r ${dir}/files/. /testbed/ && git add -A && t=$(git write-tree) && ${env} git commit-tree "$t" -m ${shq(who.message)}; rc=$?`,
          Lane.restore(dir),
          'exit $rc',
        ].join('\n'),
        120,
      );
      const id = r.stdout.trim().split('\n').at(-1) ?? '';
      if (r.exit !== 0 || !/^[0-9a-f]{40}$/.test(id)) throw new SandboxInfraError(`git commit-tree failed (exit ${r.exit}): ${(r.stdout + r.stderr).slice(-300)}`);
      return id;
    });
  }

  private async runOnce(sb: Sandbox, o: RunOptions): Promise<RunResult> {
    const extra = [{ path: 'cmd', content: this.testCmd }];
    if (o.select) extra.push({ path: 'select', content: o.select.join('\n') + '\n' });
    if (o.testLimits) extra.push({ path: 'limits.json', content: JSON.stringify(o.testLimits) });
    const dir = await this.stage(sb, o.files, extra);
    const addopts = [`-p ${PLUGIN_MODULE}`, '-p no:cacheprovider', ...(o.stopAtFirst ? ['-x'] : [])].join(' ');
    const env = [
      `export PYTHONDONTWRITEBYTECODE=1 SWERL_FACTORY_OUT=${dir}/results.jsonl`,
      `export PYTEST_ADDOPTS="\${PYTEST_ADDOPTS:+$PYTEST_ADDOPTS }${addopts}"`,
      o.select ? `export SWERL_FACTORY_SELECT=${dir}/select` : '',
      o.cover ? 'export SWERL_FACTORY_COVER=1' : '',
      o.testLimits ? `export SWERL_FACTORY_LIMITS=${dir}/limits.json` : '',
    ];
    // one exec: the run under its own limit (`timeout` signals its whole process group), then the results, then
    // the work tree as the image has it; the sandbox's limit is only a backstop
    const script = [
      'cd /testbed',
      `if [ -d ${dir}/files ]; then cp -r ${dir}/files/. /testbed/; fi`,
      ...env.filter(Boolean),
      `s=$(date +%s%N); timeout -k 5s ${o.timeoutS}s bash ${dir}/cmd > ${dir}/log 2>&1; rc=$?; e=$(date +%s%N)`,
      `echo "@@swerl-exit $rc $(( (e - s) / 1000000 ))"; tail -c 3000 ${dir}/log; echo; echo @@swerl-results; cat ${dir}/results.jsonl 2>/dev/null`,
      `${Lane.restore(dir)} || echo @@swerl-restore-failed`,
    ].join('\n');
    const r = await sb.exec(script, o.timeoutS + 120, { maxOutputBytes: 256 << 20 });
    if (r.diskLimitExceeded) {
      // the run filled the sandbox's disk: the candidate's doing (scored like a run past its limit); the sandbox goes
      await this.drop();
      return { exit: -1, timedOut: true, seconds: o.timeoutS, tests: new Map(), collectErrors: [], functions: [], logTail: r.stderr.slice(-300) };
    }
    const head = /@@swerl-exit (\d+) (\d+)\n/.exec(r.stdout);
    if (!head || r.stdout.includes('@@swerl-restore-failed') || r.timedOut)
      throw new SandboxInfraError(`a test run in the lane did not complete (exit ${r.exit}): ${(r.stdout + r.stderr).slice(-300)}`);
    const rc = Number(head[1]);
    const body = r.stdout.slice(head.index + head[0].length);
    const at = body.indexOf('@@swerl-results\n');
    const parsed = parsePluginOutput(at < 0 ? '' : body.slice(at + 16));
    return {
      exit: rc,
      timedOut: rc === 124 || (rc === 137 && Number(head[2]) >= o.timeoutS * 1000),
      seconds: Number(head[2]) / 1000,
      ...parsed,
      logTail: (at < 0 ? body : body.slice(0, at)).trim(),
    };
  }

  private async drop(): Promise<void> {
    const sb = this.sb;
    this.sb = null;
    if (!sb) return;
    // the sandbox's own cgroup: v2 cpu.stat (µs), else v1 cpuacct.usage (ns)
    const cpu = await sb.exec('cat /sys/fs/cgroup/cpu.stat 2>/dev/null || cat /sys/fs/cgroup/cpuacct/cpuacct.usage 2>/dev/null', 10).catch(() => null);
    const v2 = cpu && /usage_usec (\d+)/.exec(cpu.stdout);
    const v1 = cpu && /^(\d+)\s*$/.exec(cpu.stdout);
    if (v2) this.cpuSeconds += Number(v2[1]) / 1e6;
    else if (v1) this.cpuSeconds += Number(v1[1]) / 1e9;
    await sb.stop().catch(() => undefined);
  }

  async close(): Promise<void> {
    await this.drop();
  }
}
