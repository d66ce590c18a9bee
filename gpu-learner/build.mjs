// Configures and builds the native learner into gpu-learner/build/ with CMake (Ninja when present).
// Incremental; quiet on success; on failure prints the build log and exits non-zero.
// Usage: [GL_BLAS=OFF] node gpu-learner/build.mjs [--force]   (--force: wipe the build directory first; GL_BLAS=OFF: no
// OpenBLAS, the engine's own GEMM kernels)
import { spawnSync } from 'node:child_process';
import { existsSync, rmSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const build = join(here, 'build');
const require = createRequire(import.meta.url);

function fail(msg, out) {
  if (out) process.stderr.write(out);
  console.error(`gpu-learner: ${msg}`);
  process.exit(1);
}

function has(cmd) {
  return spawnSync(cmd, ['--version'], { stdio: 'ignore' }).status === 0;
}

function nodeIncludeDir() {
  const candidates = [];
  try {
    candidates.push(require('node-api-headers').include_dir);
  } catch {
    // not installed: the node binary's own headers below
  }
  candidates.push(join(dirname(dirname(process.execPath)), 'include', 'node'), '/usr/include/node', '/usr/local/include/node');
  return candidates.find((d) => d && existsSync(join(d, 'node_api.h')));
}

function addonApiDir() {
  try {
    const dir = dirname(require.resolve('node-addon-api/package.json'));
    return existsSync(join(dir, 'napi.h')) ? dir : undefined;
  } catch {
    return undefined;
  }
}

if (!has('cmake')) fail('cmake not found; install it (apt-get install cmake g++ ninja-build) and rerun `node gpu-learner/build.mjs`');
// GEMMs through OpenBLAS unless GL_BLAS=OFF (the engine's own kernels): name the package before CMake does.
const blas = process.env.GL_BLAS === 'OFF' ? 'OFF' : 'ON';
if (blas === 'ON' && spawnSync('pkg-config', ['--exists', 'openblas'], { stdio: 'ignore' }).status !== 0)
  fail(
    "OpenBLAS not found (pkg-config openblas): install Debian's libopenblas-dev (apt-get install libopenblas-dev pkg-config; " +
      'scripts/setup.sh does it), or build without it: GL_BLAS=OFF node gpu-learner/build.mjs --force',
  );
if (process.argv.includes('--force')) rmSync(build, { recursive: true, force: true });
mkdirSync(build, { recursive: true });

const nodeInc = nodeIncludeDir();
const napiDir = addonApiDir();
if (!nodeInc) fail('Node headers (node_api.h) not found; install the node-api-headers package or the nodejs dev headers');
if (!napiDir) fail('node-addon-api not found; run npm install');

const run = (args) => {
  const r = spawnSync('cmake', args, { cwd: build, encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0) fail(`cmake ${args.join(' ')} failed (status ${r.status})`, (r.stdout ?? '') + (r.stderr ?? ''));
};

// ccache when installed (scripts/setup.sh installs it), with the repository as its base directory: a fresh clone
// in another directory compiles from the cache shared by every clone on the machine (~/.cache/ccache).
const root = dirname(here);
const launcher = has('ccache') ? ['C', 'CXX'].map((lang) => `-DCMAKE_${lang}_COMPILER_LAUNCHER=cmake;-E;env;CCACHE_BASEDIR=${root};ccache`) : [];

if (!existsSync(join(build, 'CMakeCache.txt'))) {
  const gen = has('ninja') ? ['-G', 'Ninja'] : [];
  run([
    ...gen,
    ...launcher,
    '-S',
    here,
    '-B',
    build,
    '-DCMAKE_BUILD_TYPE=Release',
    `-DNODE_INCLUDE_DIR=${nodeInc}`,
    `-DNODE_ADDON_API_DIR=${napiDir}`,
    `-DGL_NODE=${process.execPath}`,
    `-DGL_BLAS=${blas}`,
  ]); // GL_NODE: the CUDA emulator's source rewrite (emu/emu.cmake)
}
run(['--build', build, '--parallel', String(Math.max(1, Math.min(4, (await import('node:os')).availableParallelism())))]);
if (!existsSync(join(build, 'gpu_learner.node'))) fail('build finished but build/gpu_learner.node is missing');
