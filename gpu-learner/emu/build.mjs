// Builds the gl-emu targets (emu/emu.cmake) in gpu-learner/build, next to the native build whose gl_core they
// link. Cached by content: when the SHA-256 of every input (sources, headers, emulator, build files, compiler
// version) matches the last successful build and the binaries exist, nothing runs, not even the build tool
// (a fresh clone with a restored build directory has new mtimes, which would otherwise rebuild everything).
// Usage: node gpu-learner/emu/build.mjs [--mutants] [--force]     (--mutants: also the planted-bug builds)
// Prints nothing on success unless it built; exits non-zero with the build log on failure.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const emu = dirname(fileURLToPath(import.meta.url));
const gl = dirname(emu);
const build = join(gl, 'build');

export const emuBinaries = ['gpu_driver_emu_bf16', 'gpu_driver_emu_exact', 'gpu_driver_emu_asan', 'gl_emu_selftest'];
export function mutantNames() {
  return JSON.parse(readFileSync(join(emu, 'mutants.json'), 'utf8')).map((m) => m.name);
}

function files(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    return e.isDirectory() ? files(p) : [p];
  });
}

function inputsHash(targets) {
  const h = createHash('sha256');
  const inputs = [
    ...files(join(gl, 'src')), ...files(join(gl, 'include')), ...files(emu),
    join(gl, 'tools', 'gpu_driver.cpp'), join(gl, 'CMakeLists.txt'), join(gl, 'build.mjs'),
  ].sort();
  for (const f of inputs) h.update(relative(gl, f)).update('\0').update(readFileSync(f)).update('\0');
  for (const tool of [['c++', '--version'], ['cmake', '--version']]) h.update(spawnSync(tool[0], tool.slice(1), { encoding: 'utf8' }).stdout ?? '');
  h.update(targets.join(','));
  return h.digest('hex');
}

function fail(msg, out) {
  if (out) process.stderr.write(out);
  console.error(`gl-emu build: ${msg}`);
  process.exit(1);
}

/** Builds the emulator (and optionally the mutants); returns the build directory. */
export function buildEmu({ mutants = false, force = false, quiet = true } = {}) {
  const targets = mutants ? ['gl_emu', 'gl_emu_mutants'] : ['gl_emu'];
  const bins = [...emuBinaries, ...(mutants ? mutantNames().map((n) => `gpu_driver_mutant_${n}`) : [])];
  const stamp = join(build, `.gl-emu-${mutants ? 'all' : 'core'}.sha256`);
  const hash = inputsHash(targets);
  const have = bins.every((b) => existsSync(join(build, b)));
  if (!force && have && existsSync(stamp) && readFileSync(stamp, 'utf8') === hash) return build;
  if (!existsSync(join(build, 'CMakeCache.txt'))) {
    const r = spawnSync(process.execPath, [join(gl, 'build.mjs')], { encoding: 'utf8' });
    if (r.status !== 0) fail('native build failed', (r.stdout ?? '') + (r.stderr ?? ''));
  }
  const t0 = Date.now();
  const jobs = String(Math.max(1, Math.min(4, availableParallelism())));
  const r = spawnSync('cmake', ['--build', build, '--target', ...targets, '--parallel', jobs], { encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0) fail(`cmake --build --target ${targets.join(' ')} failed (status ${r.status})`, (r.stdout ?? '') + (r.stderr ?? ''));
  for (const b of bins) if (!existsSync(join(build, b))) fail(`build finished but ${b} is missing`);
  writeFileSync(stamp, hash);
  if (!quiet) console.error(`gl-emu build: ${targets.join(' + ')} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  return build;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  buildEmu({ mutants: process.argv.includes('--mutants'), force: process.argv.includes('--force'), quiet: false });
}
