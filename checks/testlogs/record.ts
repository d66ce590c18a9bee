// Records the parser fixtures (test/fixtures/testlogs/) from real runs: small real suites
// (checks/testlogs/suites/) run with pytest, unittest, Django's runner and sympy's runner on three
// Debian releases (bullseye: Python 3.9, pytest 6.0, Django 2.2, sympy 1.7; bookworm: 3.11, 7.2, 3.2,
// 1.11; trixie: 3.13, 8.3, 4.2, 1.13), each in a container with no network. Next to every log goes
// its truth, recorded by the run itself (pytest's own stats, unittest/Django result objects, sympy's
// reporter), never typed by hand. Also records the repository's SWE tasks' test logs (data/swe/) without and with
// the gold patch (truth: the grader's results plugin). Suites run in /suite inside the container.
//   node --import tsx checks/testlogs/record.ts [--only NAME]     (builds the images once: ~3 min each)
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, readFile, readdir, rm, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DockerBackend, removeSandboxContainers } from '../../activities/sandbox/docker.ts';
import { aptMirror } from '../../activities/images.ts';
import { imageExists } from '../../services/docker.ts';
import { runTaskTests } from '../../activities/grade.ts';
import { loadTasksStrict } from '../../lib/swe/task.ts';
import { buildSweTasks } from '../../scripts/build-swe-tasks.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SUITES = join(ROOT, 'checks/testlogs/suites');
const OUT = join(ROOT, 'test/fixtures/testlogs');
const RELEASES = ['bullseye', 'bookworm', 'trixie'] as const;
const PACKAGES = ['python3', 'python3-pytest', 'python3-django', 'python3-sympy'];
const labels = { 'swerl.purpose': 'testlog-recording' };
/** where a suite runs inside its container */
const AT = '/suite';

function sh(cmd: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const p = spawn('bash', ['-c', `set -euo pipefail; ${cmd}`], { stdio: ['ignore', 'inherit', 'inherit'] });
    p.on('close', (c) => (c === 0 ? resolve() : reject(new Error(`${cmd.slice(0, 120)}: exit ${c}`))));
  });
}

async function ensureImage(release: string): Promise<string> {
  const name = `swerl-testlogs-${release}:1`;
  if (await imageExists(name)) return name;
  const dir = await mkdtemp(join(tmpdir(), `swerl-testlogs-${release}-`));
  try {
    console.log(`debootstrap ${release} (${PACKAGES.join(', ')})`);
    await sh(`debootstrap --variant=minbase --include=${PACKAGES.join(',')} ${release} '${dir}/rootfs' '${aptMirror()}' >/dev/null`);
    await sh(`rm -rf '${dir}'/rootfs/var/cache/apt/archives/*.deb '${dir}'/rootfs/var/lib/apt/lists/*`);
    await sh(`tar -C '${dir}/rootfs' -c . | docker import --change 'ENV LANG=C.UTF-8' --change 'ENV PYTHONDONTWRITEBYTECODE=1' - '${name}' >/dev/null`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  return name;
}

async function suiteFiles(sub: string): Promise<{ path: string; content: string }[]> {
  const base = join(SUITES, sub);
  const out: { path: string; content: string }[] = [];
  const walk = async (d: string) => {
    for (const e of await readdir(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) await walk(p);
      else out.push({ path: relative(base, p), content: await readFile(p, 'utf8') });
    }
  };
  await walk(base);
  return out;
}

interface Recording {
  name: string;
  suite: string;
  /** run from AT; $TRUTH is the truth file */
  cmd: string;
  /** copied to the sympy package instead of AT */
  sympy?: boolean;
  /** also load the grader's results plugin and keep its records (<name>.plugin.jsonl) */
  plugin?: boolean;
}

// the plugin writes to descriptor 9 (opened by the recording command) and checks the suite's test file
const PLUGIN = readFileSync(join(ROOT, 'lib/swe/swerl_pytest_results.py'), 'utf8').replace('"__SWERL_CONFIG_PATH__"', JSON.stringify(`${AT}/swerl_config.json`));
const PLUGIN_CONFIG = JSON.stringify({
  fd: 9,
  remove: [],
  addopts: '',
  testbed: AT,
  files: [`${AT}/test_pt.py`],
  testFiles: [`${AT}/test_pt.py`],
  touched: [],
  blobs: {},
  checks: true,
});

const RECORDINGS: Recording[] = [
  // the grader's results plugin rides along (its records are compared with the truth too)
  { name: 'pytest', suite: 'pytest', cmd: 'python3 -m pytest -rA -p no:cacheprovider -p truth_plugin -p swerl_results_fixture test_pt.py', plugin: true },
  { name: 'pytest-v', suite: 'pytest', cmd: 'python3 -m pytest -rA -v -p no:cacheprovider -p truth_plugin -p swerl_results_fixture test_pt.py', plugin: true },
  { name: 'unittest', suite: 'unittest', cmd: 'python3 run_recorded.py test_ut' },
  { name: 'django', suite: 'django', cmd: 'python3 runtests.py --verbosity 2' },
  { name: 'sympy', suite: 'sympy', cmd: 'python3 run_recorded.py', sympy: true },
];

async function record(backend: DockerBackend, image: string, release: string, r: Recording): Promise<void> {
  const sb = await backend.start(image, { memoryBytes: 1 << 30 }, labels);
  try {
    const plugin = r.plugin
      ? [
          { path: 'swerl_results_fixture.py', content: PLUGIN },
          { path: 'swerl_config.json', content: PLUGIN_CONFIG },
        ]
      : [];
    await sb.copyIn([...(await suiteFiles(r.suite)), ...plugin], AT);
    if (r.sympy) {
      const d = (await sb.exec("python3 -c 'import os, sympy; print(os.path.dirname(sympy.__file__))'", 60)).stdout.trim();
      await sb.exec(
        `mkdir -p ${d}/swerl_fixture/tests && cp ${AT}/sympy_pkg/*.py ${d}/swerl_fixture/tests/ && touch ${d}/swerl_fixture/__init__.py ${d}/swerl_fixture/tests/__init__.py`,
        60,
      );
    }
    const res = await sb.exec(`cd ${AT} && ${r.plugin ? `exec 9>>${AT}/plugin.jsonl && ` : ''}export PYTHONPATH=${AT} SWERL_TRUTH=${AT}/truth.json && ${r.cmd} 2>&1`, 300, {
      cwd: AT,
    });
    const truth = await sb.readFile(`${AT}/truth.json`);
    const version = (
      await sb.exec(
        "python3 --version 2>&1; python3 -m pytest --version 2>&1 | head -1; python3 -c \"import django, sympy; print('django', django.__version__, 'sympy', sympy.__version__)\"",
        60,
      )
    ).stdout
      .trim()
      .replace(/\n/g, '; ');
    const base = join(OUT, `${release}-${r.name}`);
    await writeFile(`${base}.log`, res.stdout);
    if (r.plugin) await writeFile(`${base}.plugin.jsonl`, await sb.readFile(`${AT}/plugin.jsonl`));
    await writeFile(
      `${base}.truth.json`,
      JSON.stringify({ recorded: { release, versions: version, cmd: r.cmd, exit: res.exit }, truth: JSON.parse(truth) as unknown }, null, 1) + '\n',
    );
    console.log(`${release}-${r.name}: exit ${res.exit}, ${res.stdout.split('\n').length} lines (${version})`);
  } finally {
    await sb.stop();
  }
}

/** The tasks' logs without the fix and with the gold patch; truth: the grader's plugin records. */
async function recordTasks(backend: DockerBackend): Promise<void> {
  const tasks = await loadTasksStrict(await buildSweTasks());
  for (const t of tasks) {
    for (const [label, patch] of [
      ['before', ''],
      ['gold', t.patch],
    ] as const) {
      let log = '';
      const g = await runTaskTests({ task: t, patch, backend, onLog: (l) => void (log = l) });
      const base = join(OUT, `task-${t.instance_id}-${label}`);
      await writeFile(`${base}.log`, log);
      const truth = Object.fromEntries([...Object.entries(g.tests.FAIL_TO_PASS), ...Object.entries(g.tests.PASS_TO_PASS)]);
      await writeFile(`${base}.truth.json`, JSON.stringify({ recorded: { task: t.instance_id, cmd: t.test_cmd, exit: g.exitCode, channel: g.channel }, truth }, null, 1) + '\n');
      console.log(`task ${t.instance_id} ${label}: reward ${g.reward}`);
    }
  }
}

const only = process.argv.includes('--only') ? process.argv[process.argv.indexOf('--only') + 1] : undefined;
await mkdir(OUT, { recursive: true });
const backend = new DockerBackend({ labels });
try {
  for (const release of RELEASES) {
    if (only && !only.startsWith(release) && only !== 'suites') continue;
    const image = await ensureImage(release);
    for (const r of RECORDINGS) if (!only || only === release || only === 'suites' || only === `${release}-${r.name}`) await record(backend, image, release, r);
  }
  if (!only || only === 'tasks') await recordTasks(backend);
} finally {
  await removeSandboxContainers({ labels });
}
