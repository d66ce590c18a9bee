// Builds the gl-emu targets (emu/emu.cmake) in gpu-learner/build, next to the native build whose gl_core they
// link. Cached by content: when the SHA-256 of every input (sources, headers, emulator, build files, compiler
// and CMake versions) matches the last successful build and the binaries exist, nothing runs, not even the build
// tool (a fresh clone with a restored build directory has new mtimes, which would otherwise rebuild everything).
// Usage: node --import tsx gpu-learner/emu/build.ts [--mutants] [--force]   (--mutants: the planted-bug builds too)
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

export const EMU_DIR = dirname(fileURLToPath(import.meta.url));
const GL = dirname(EMU_DIR);
export const BUILD_DIR = join(GL, 'build');
export const EMU_BINARIES = ['gpu_driver_emu_bf16', 'gpu_driver_emu_exact', 'gpu_driver_emu_asan', 'gl_emu_selftest'];

export interface MutantSpec {
  name: string;
  why: string;
  file: string;
  edits: { find: string; replace: string }[];
  /** what must fail: "compare:<config>" or "leaks" */
  check: string;
}
export function mutantSpecs(): MutantSpec[] {
  return JSON.parse(readFileSync(join(EMU_DIR, 'mutants.json'), 'utf8')) as MutantSpec[];
}

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(join(dir, e.name)) : [join(dir, e.name)]));
}

function inputsHash(targets: string[]): string {
  const h = createHash('sha256');
  const inputs = [
    ...files(join(GL, 'src')),
    ...files(join(GL, 'include')),
    ...files(EMU_DIR),
    join(GL, 'tools', 'gpu_driver.cpp'),
    join(GL, 'CMakeLists.txt'),
    join(GL, 'build.mjs'),
  ].sort();
  for (const f of inputs) h.update(relative(GL, f)).update('\0').update(readFileSync(f)).update('\0');
  for (const [cmd, arg] of [
    ['c++', '--version'],
    ['cmake', '--version'],
  ])
    h.update(spawnSync(cmd, [arg], { encoding: 'utf8' }).stdout ?? '');
  return h.update(targets.join(',')).digest('hex');
}

export interface BuildResult {
  dir: string;
  built: boolean;
  seconds: number;
}

/** Builds the emulator binaries (and the mutants when asked); throws with the build log on failure. */
export function buildEmu(opts: { mutants?: boolean; force?: boolean } = {}): BuildResult {
  const t0 = Date.now();
  const targets = opts.mutants ? ['gl_emu', 'gl_emu_mutants'] : ['gl_emu'];
  const bins = [...EMU_BINARIES, ...(opts.mutants ? mutantSpecs().map((m) => `gpu_driver_mutant_${m.name}`) : [])];
  const stamp = join(BUILD_DIR, `.gl-emu-${opts.mutants ? 'all' : 'core'}.sha256`);
  const hash = inputsHash(targets);
  const fresh = bins.every((b) => existsSync(join(BUILD_DIR, b))) && existsSync(stamp) && readFileSync(stamp, 'utf8') === hash;
  if (fresh && !opts.force) return { dir: BUILD_DIR, built: false, seconds: (Date.now() - t0) / 1000 };
  if (!existsSync(join(BUILD_DIR, 'CMakeCache.txt'))) {
    const r = spawnSync(process.execPath, [join(GL, 'build.mjs')], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`native build failed:\n${r.stdout ?? ''}${r.stderr ?? ''}`);
  }
  const jobs = String(Math.max(1, Math.min(4, availableParallelism())));
  const r = spawnSync('cmake', ['--build', BUILD_DIR, '--target', ...targets, '--parallel', jobs], { encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`gl-emu build (cmake --build --target ${targets.join(' ')}) failed:\n${r.stdout ?? ''}${r.stderr ?? ''}`);
  for (const b of bins) if (!existsSync(join(BUILD_DIR, b))) throw new Error(`gl-emu build finished but ${b} is missing`);
  writeFileSync(stamp, hash);
  return { dir: BUILD_DIR, built: true, seconds: (Date.now() - t0) / 1000 };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  try {
    const r = buildEmu({ mutants: process.argv.includes('--mutants'), force: process.argv.includes('--force') });
    if (r.built) console.error(`gl-emu: built in ${r.seconds.toFixed(1)} s`);
  } catch (e) {
    console.error((e as Error).message);
    process.exit(1);
  }
}
