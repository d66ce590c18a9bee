// The pure side of one grading run (activities/grade.ts runs it): which runner reads the statuses, the
// shell scripts the sandbox runs (prepare, set-up, the test run), how their output is read back, and the
// results plugin's configuration. No I/O here, so each piece is unit-tested without a container.
import { shq } from '../shell.ts';

/** Whether test_cmd runs pytest (then the plugin channel is used). */
export function runsPytest(testCmd: string): boolean {
  return /(^|[\s;&|(/])(py\.test|pytest)(\s|$|;)/.test(testCmd);
}

/**
 * The Python process of a unittest-style test_cmd that runs the tests: `python -m MODULE` or a script
 * (Django's tests/runtests.py); undefined when it cannot be told (then the run is read from the log alone).
 */
export function testProcessOf(testCmd: string): { module: string } | { script: string } | undefined {
  const m = /(?:^|[\s;&|(/])python[\d.]*\s+(?:-[A-Za-z]+(?:\s+[^-\s]\S*)?\s+)*?-m\s+([\w.]+)/.exec(testCmd);
  if (m) return { module: m[1]! };
  const s = /(?:^|\s)(\S*runtests\.py)(?=\s|$)/.exec(testCmd) ?? /(?:^|[\s;&|(/])python[\d.]*\s+(?:-[A-Za-z]+\s+)*(\S+\.py)(?=\s|$)/.exec(testCmd);
  return s ? { script: s[1]! } : undefined;
}

/** The .pth line that imports the plugin at start-up in the test process only (unittest-style runs). */
export function startupLine(module: string, proc: { module: string } | { script: string }): string {
  // imported, then no longer findable under its per-run name
  const load = `__import__(${JSON.stringify(module)}) and sys.modules.pop(${JSON.stringify(module)}, None)`;
  if ('module' in proc) {
    // (site execs the line in a function: no comprehension can see its names)
    return `import sys; _a = getattr(sys, 'orig_argv', None); (('\\0-m\\0' + ${JSON.stringify(proc.module)} + '\\0') in ('\\0' + '\\0'.join(_a) + '\\0') if _a else sys.argv[:1] == ['-m']) and ${load}`;
  }
  const base = proc.script.split('/').at(-1)!;
  return `import sys, os; os.path.basename((sys.argv or [''])[0]) == ${JSON.stringify(base)} and ${load}`;
}

/** Files a unittest id may name, under the roots unittest and Django's runner import from (prepare keeps those that exist). */
export function unittestIdCandidates(ids: readonly string[]): string[] {
  const out = new Set<string>();
  for (const id of ids) {
    const m = /^\w+ \(([\w.]+)\)/.exec(id);
    if (!m) continue;
    const parts = m[1]!.split('.');
    for (let n = 1; n < parts.length; n++) for (const r of ['', 'src/', 'tests/']) out.add(`${r}${parts.slice(0, n).join('/')}.py`);
  }
  return [...out];
}

/** A unittest id (`name (module.Class)` or `name (module.Class.name)`) as file::Class::name, given its file. */
export function unittestAsNodeId(id: string, file: string): string | undefined {
  const m = /^(\w+) \(([\w.]+)\)/.exec(id);
  if (!m) return undefined;
  const parts = m[2]!.split('.');
  const stem = file.replace(/\.py$/, '').split('/');
  // the dotted module is the file's path, from some root on
  for (let k = 0; k < stem.length; k++) {
    const mod = stem.slice(k);
    if (mod.every((p, i) => parts[i] === p)) {
      const rest = parts.slice(mod.length);
      if (rest.length === 1 || (rest.length === 2 && rest[1] === m[1])) return `${file}::${rest[0]}::${m[1]}`;
    }
  }
  return undefined;
}

/** A node id `file::Class::name` back in unittest's format, given the unittest id of the test it was made from. */
export function unittestIdLike(sourceId: string, sourceNode: string, node: string): string {
  const [from, to] = [sourceNode.split('::').at(-1)!, node.split('::').at(-1)!];
  return sourceId.replace(new RegExp(`^${from} \\((.*?)(\\.${from})?\\)$`), (_a, inner: string, tail?: string) => `${to} (${inner}${tail ? `.${to}` : ''})`);
}

/** Prints one JSON line per interpreter: its top-level module names from outside /testbed and its site directories. */
const PROBE = [
  'import sys,os,json,site,sysconfig',
  "n=set(sys.builtin_module_names)|set(getattr(sys,'stdlib_module_names',()))",
  'for p in sys.path:',
  " r=os.path.realpath(p or '.')",
  " if r=='/testbed' or r.startswith('/testbed/') or not os.path.isdir(r): continue",
  ' for e in os.listdir(r):',
  "  if e.endswith(('.py','.pyc','.so','.pyd')) or os.path.isdir(os.path.join(r,e)): n.add(e.split('.')[0])",
  "s=list(site.getsitepackages()) if hasattr(site,'getsitepackages') else []",
  "s.append(sysconfig.get_paths()['purelib'])",
  "print(json.dumps({'exe':sys.executable,'names':sorted(x for x in n if x.isidentifier()),'site':s}))",
].join('\n');

/** What prepare learned about the container, the base commit and the patch. */
export interface Prep {
  names: Set<string>;
  siteDirs: string[];
  /** every file of the base commit → its blob id */
  baseBlobs: Map<string, string>;
  baseFiles: Set<string>;
  applied: boolean;
  applyLog: string;
  touched: string[];
  packageInits: Set<string>;
  /** the asked-for files as base + test_patch has them (absent: no such file, or test_patch does not apply) */
  testSources: Map<string, string>;
  /** the audited files (the patch's Python files): their text at the base commit and after the patch (absent: no such file) */
  before: Map<string, string>;
  after: Map<string, string>;
}

/** `git apply --numstat -z`: "A\tD\tpath\0" or, for a rename, "A\tD\t\0old\0new\0". */
export function parseNumstatZ(out: string): string[] {
  const parts = out.split('\0');
  const paths: string[] = [];
  for (let i = 0; i < parts.length; i++) {
    const p = parts[i]!;
    if (p === '') continue;
    const m = /^(?:\d+|-)\t(?:\d+|-)\t(.*)$/s.exec(p);
    if (!m) continue;
    if (m[1] !== '') paths.push(m[1]!);
    else {
      if (parts[i + 1]) paths.push(parts[i + 1]!);
      if (parts[i + 2]) paths.push(parts[i + 2]!);
      i += 2;
    }
  }
  return [...new Set(paths)];
}

/** `git ls-tree -r -z HEAD`: "mode type oid\tpath\0" → path → blob id. */
export function parseLsTreeZ(out: string): Map<string, string> {
  const m = new Map<string, string>();
  for (const e of out.split('\0')) {
    const tab = e.indexOf('\t');
    if (tab < 0) continue;
    const [, type, oid] = e.slice(0, tab).replace(/^\n+/, '').split(' ');
    if (type === 'blob' && oid) m.set(e.slice(tab + 1), oid);
  }
  return m;
}

/** The sections of a script's output, each after a line `MARKER name`: name → text. */
export function sections(out: string, marker: string): Map<string, string> {
  const m = new Map<string, string>();
  const parts = out.split(`\n${marker} `);
  for (const p of parts.slice(1)) {
    const nl = p.indexOf('\n');
    m.set(nl < 0 ? p : p.slice(0, nl), nl < 0 ? '' : p.slice(nl + 1));
  }
  return m;
}

export interface PrepareOptions {
  /** the grader's directory in the container (test.diff, patch.diff there) */
  work: string;
  marker: string;
  hasPatch: boolean;
  hasTestPatch: boolean;
  /** files to read as base + test_patch has them */
  wanted: readonly string[];
  /** files to read at the base commit (key: the path after the patch; value: its path at the base, for a rename) and after the patch */
  audited: ReadonlyMap<string, string>;
}

/**
 * The prepare script: interpreters probed, the base file list, the `wanted` files as base + test_patch has
 * them (through a scratch index: the work tree is not touched); then the patch applied, what it touched, and
 * the audited files before and after it.
 */
export function prepareScript(o: PrepareOptions): string {
  const { work, marker } = o;
  const idx = `GIT_INDEX_FILE=${work}/index`;
  const show = (f: string) => `if ${idx} git cat-file -e ":${f}" 2>/dev/null; then printf '\\n${marker} file %s\\n' ${shq(f)}; ${idx} git show ${shq(`:${f}`)}; fi`;
  const testPatched = o.hasTestPatch ? `${idx} git read-tree HEAD && ${idx} git apply --cached --whitespace=nowarn ${work}/test.diff 2>/dev/null` : `${idx} git read-tree HEAD`;
  return [
    'cd /testbed',
    `for py in python3 python; do command -v "$py" >/dev/null 2>&1 || continue; (cd / && "$py" -I -c ${shq(PROBE)}) 2>/dev/null | sed 's/^/@probe /'; done`,
    `printf '\\n${marker} base\\n'; git ls-tree -r -z HEAD`,
    o.wanted.length ? [`if ${testPatched}; then`, ...o.wanted.map((f) => `  ${show(f)}`), `fi; rm -f ${work}/index`].join('\n') : '',
    ...[...o.audited].map(
      ([now, was]) => `if git cat-file -e ${shq(`HEAD:${was}`)} 2>/dev/null; then printf '\\n${marker} before %s\\n' ${shq(now)}; git show ${shq(`HEAD:${was}`)}; fi`,
    ),
    o.hasPatch
      ? [
          `printf '\\n${marker} apply\\n'`,
          `if git apply --whitespace=nowarn ${work}/patch.diff 2>${work}/apply.log; then echo applied`,
          `elif command -v patch >/dev/null 2>&1 && patch --batch --fuzz=5 -p1 --dry-run -i ${work}/patch.diff >/dev/null 2>&1 && patch --batch --fuzz=5 -p1 -i ${work}/patch.diff >${work}/apply.log 2>&1; then echo applied`,
          `else echo failed; cat ${work}/apply.log; fi`,
          `printf '\\n${marker} touched\\n'; git apply --numstat -z ${work}/patch.diff`,
        ].join('\n')
      : '',
    ...[...o.audited.keys()].map((f) => `if [ -f ${shq(f)} ]; then printf '\\n${marker} after %s\\n' ${shq(f)}; cat ${shq(f)}; fi`),
    `printf '\\n${marker} inits\\n'; find . -path ./.git -prune -o -name __init__.py -print0`,
    `printf '\\n${marker} end\\n'`,
  ]
    .filter((l) => l !== '')
    .join('\n');
}

/** What prepareScript printed, read back; undefined when it did not run to its end. */
export function parsePrepare(stdout: string, marker: string): Prep | undefined {
  const s = sections('\n' + stdout, marker);
  if (!s.has('end')) return undefined;
  const names = new Set<string>();
  const siteDirs: string[] = [];
  for (const line of stdout.split('\n')) {
    if (!line.startsWith('@probe ')) continue;
    try {
      const p = JSON.parse(line.slice(7)) as { names: string[]; site: string[] };
      for (const n of p.names) names.add(n);
      for (const d of p.site) if (!siteDirs.includes(d)) siteDirs.push(d);
    } catch {
      // an interpreter that printed something else (Python 2 without -I, say): not one the tests use
    }
  }
  const z = (t: string | undefined) =>
    (t ?? '')
      .split('\0')
      .map((x) => x.replace(/^\n+|\n+$/g, ''))
      .filter((x) => x !== '');
  const apply = s.get('apply') ?? 'applied\n';
  const baseBlobs = parseLsTreeZ(s.get('base') ?? '');
  const byPrefix = (prefix: string) => new Map([...s].filter(([k]) => k.startsWith(prefix)).map(([k, v]) => [k.slice(prefix.length), v]));
  return {
    names,
    siteDirs,
    baseBlobs,
    baseFiles: new Set(baseBlobs.keys()),
    applied: apply.startsWith('applied'),
    applyLog: apply.replace(/^(applied|failed)\n?/, ''),
    touched: parseNumstatZ(s.get('touched') ?? ''),
    packageInits: new Set(z(s.get('inits')).map((p) => p.replace(/^\.\//, ''))),
    testSources: byPrefix('file '),
    before: byPrefix('before '),
    after: byPrefix('after '),
  };
}

/** The results plugin's configuration (lib/swe/swerl_pytest_results.py reads it at load, then removes it). */
export interface PluginConfig {
  fd: number;
  /** the grader's directory in the container: removed at load */
  workdir: string;
  /** other files of the grader: removed at load (.pth files) */
  remove: string[];
  /** what the grader appended to PYTEST_ADDOPTS: removed from the environment at load */
  addopts: string;
  testbed: string;
  /** absolute paths compiled fresh at load: the listed test files and their test-support modules */
  files: string[];
  /** the listed test files among them */
  testFiles: string[];
  /** repository paths the patch changed and the grader did not restore */
  touched: string[];
  /** repository .py files as the base commit has them (path → blob id): code met outside `files` is checked against them */
  blobs: Record<string, string>;
  checks: boolean;
  /** pytest (loaded with -p) or unittest (imported at start-up by the .pth file in the test process) */
  runner: 'pytest' | 'unittest';
}

/**
 * The set-up before the run: the restored paths back to base, test_patch applied (when there is one), the
 * canary files written, the grader's copies of the patches removed, and the plugin's .pth files.
 */
export function setupScript(o: {
  work: string;
  restore: readonly string[];
  hasTestPatch: boolean;
  canaryPaths: readonly string[];
  /** site directory → the lines of the plugin's .pth file there (none: no plugin) */
  pth: ReadonlyMap<string, readonly string[]>;
  module: string;
}): string {
  const { work } = o;
  return [
    'set -e',
    'restore() { rm -rf -- "$1"; if git cat-file -e "HEAD:$1" 2>/dev/null; then git checkout -q HEAD -- "$1"; fi; }',
    ...o.restore.map((f) => `restore ${shq(f)}`),
    ...(o.hasTestPatch ? [`git apply --whitespace=nowarn ${work}/test.diff`] : []),
    ...o.canaryPaths.map((p, i) => `cat ${work}/canary/${i} > ${shq(p)}`),
    // nothing of test_patch, the patch or the canaries stays beside the plugin
    `rm -rf ${work}/test.diff ${work}/patch.diff ${work}/apply.log ${work}/canary`,
    ...[...o.pth].map(([d, lines]) => `mkdir -p ${shq(d)} && printf '%s\\n' ${lines.map(shq).join(' ')} > ${shq(`${d}/${o.module}.pth`)}`),
  ].join('\n');
}

/**
 * The shell of the test run: the results descriptor is opened on a file that is unlinked at once (the
 * test process holds it, nothing names it), test_cmd runs in a subshell with the plugin in PYTEST_ADDOPTS
 * (and `extraArgs`, e.g. canary ids when test_cmd names test ids), and the records are kept afterwards.
 */
export function testRunScript(o: { testCmd: string; addopts: string; resultsTmp: string; resultsOut: string; fd: number }): string {
  const addopts = o.addopts;
  return [
    `exec ${o.fd}>${shq(o.resultsTmp)} && rm -f ${shq(o.resultsTmp)}`,
    ...(addopts ? [`export PYTEST_ADDOPTS="\${PYTEST_ADDOPTS:+$PYTEST_ADDOPTS }"${shq(addopts)}`] : []),
    `(\n${o.testCmd}\n)`,
    'rc=$?',
    `mkdir -p ${shq(o.resultsOut.slice(0, o.resultsOut.lastIndexOf('/')))} && cat /proc/self/fd/${o.fd} > ${shq(o.resultsOut)}`,
    'exit $rc',
  ].join('\n');
}

/** a tampered run can contradict itself on every test: the first few say enough (the result crosses Temporal) */
const DETAIL_ITEMS = 12;
const DETAIL_CHARS = 4000;

/** Contradictions as one detail string: the first DETAIL_ITEMS, then how many more. */
export function contradictionDetail(items: readonly string[]): string {
  const shown = items.slice(0, DETAIL_ITEMS).map((x) => (x.length > 600 ? `${x.slice(0, 600)}…` : x));
  const more = items.length - shown.length;
  const text = shown.join('; ') + (more > 0 ? `; … and ${more} more` : '');
  return text.length > DETAIL_CHARS ? `${text.slice(0, DETAIL_CHARS)}…` : text;
}

/** The paths a patch renames: new path → old path (`rename from` / `rename to` of git's extended headers). */
export function renamesInPatch(patch: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of patch.matchAll(/^rename from (.+)\nrename to (.+)$/gm)) out.set(m[2]!, m[1]!);
  return out;
}
