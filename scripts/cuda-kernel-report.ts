// Compile-time facts of the CUDA kernels without a GPU: registers, spills, stack frame and static shared memory
// per kernel for sm_90, from ptxas -v on the .cu files that define kernels (device code only, -cubin: no host
// compile, no cuBLAS). gpu-learner/src/cuda/kernel-resources.json records the facts with the SHA-256 of the kernel
// sources they came from: while the sources match, the record is the report (the pinned nvcc is deterministic) and
// nothing is compiled; once they change, ptxas runs (about a minute for attention.cu, cached in gpu-learner/build by
// sources and nvcc version) and a kernel that spills more than recorded fails, so a change that makes a kernel spill
// is seen in CI.
//   node --import tsx scripts/cuda-kernel-report.ts [--update] [--json FILE] [--needs-nvcc]
// nvcc: $NVCC, then PATH, /usr/local/cuda/bin, .tools/cuda (bash scripts/ensure-cuda-toolchain.sh --compiler).
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const CUDA_SRC = join(ROOT, 'gpu-learner', 'src', 'cuda');
export const BASELINE = join(CUDA_SRC, 'kernel-resources.json');
const KERNEL_FILES = ['kernels.cu', 'attention.cu'];
const ARCH = 'sm_90';

export interface KernelFacts {
  kernel: string;
  file: string;
  registers: number;
  spillStores: number;
  spillLoads: number;
  stackFrame: number;
  smem: number;
}
export interface KernelReport {
  nvcc: string;
  arch: string;
  /** SHA-256 of the kernel sources and flags the facts came from */
  sources: string;
  kernels: KernelFacts[];
}

const FLAGS = ['-cubin', `-arch=${ARCH}`, '-std=c++17', '-O3', '-Xptxas', '-v'];

function sourcesHash(): string {
  const h = createHash('sha256').update(FLAGS.join(' '));
  for (const f of readdirSync(CUDA_SRC)
    .filter((f) => KERNEL_FILES.includes(f) || f.endsWith('.cuh'))
    .sort())
    h.update(f).update(readFileSync(join(CUDA_SRC, f)));
  return h.digest('hex');
}

/** The recorded facts when they are for the current kernel sources; undefined when stale (nvcc needed). */
export function recordedReport(): KernelReport | undefined {
  if (!existsSync(BASELINE)) return undefined;
  const b = JSON.parse(readFileSync(BASELINE, 'utf8')) as KernelReport;
  return b.sources === sourcesHash() ? b : undefined;
}

export function findNvcc(): string | undefined {
  const candidates = [
    process.env.NVCC,
    ...(process.env.PATH ?? '').split(':').map((d) => join(d, 'nvcc')),
    '/usr/local/cuda/bin/nvcc',
    join(ROOT, '.tools', 'cuda', 'nvidia', 'cu13', 'bin', 'nvcc'),
  ];
  return candidates.find((c) => !!c && existsSync(c));
}

// "gl::cuda::(anonymous namespace)::attn_fwd_kernel<4>(bf16*, ...)" → "attn_fwd_kernel<4>"
function shortName(demangled: string): string {
  const noArgs = demangled
    .replace(/^void /, '')
    .replace(/\(anonymous namespace\)::/g, '')
    .replace(/\(.*$/, '');
  return noArgs.replace(/^.*::/, '').replace(/__nv_bfloat16/g, 'bf16');
}

function parse(log: string, file: string): KernelFacts[] {
  const out: KernelFacts[] = [];
  const lines = log.split('\n');
  let cur: KernelFacts | undefined;
  for (const line of lines) {
    let m = /Compiling entry function '([^']+)'/.exec(line);
    if (m) {
      cur = { kernel: m[1], file, registers: 0, spillStores: 0, spillLoads: 0, stackFrame: 0, smem: 0 };
      out.push(cur);
      continue;
    }
    if (!cur) continue;
    m = /(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads/.exec(line);
    if (m) [cur.stackFrame, cur.spillStores, cur.spillLoads] = [Number(m[1]), Number(m[2]), Number(m[3])];
    m = /Used (\d+) registers/.exec(line);
    if (m) cur.registers = Number(m[1]);
    m = /(\d+) bytes smem/.exec(line);
    if (m) cur.smem = Number(m[1]);
  }
  const names = spawnSync('c++filt', { input: out.map((k) => k.kernel).join('\n'), encoding: 'utf8' });
  const dem = names.status === 0 ? names.stdout.split('\n') : [];
  out.forEach((k, i) => (k.kernel = shortName(dem[i] || k.kernel)));
  return out.sort((a, b) => a.kernel.localeCompare(b.kernel));
}

export function kernelReport(nvcc: string): { report: KernelReport; cached: boolean; seconds: number } {
  const t0 = Date.now();
  const version = spawnSync(nvcc, ['--version'], { encoding: 'utf8' }).stdout.trim().split('\n').pop() ?? '';
  const flags = [...FLAGS, '-I', join(ROOT, 'gpu-learner', 'include'), '-I', CUDA_SRC];
  const sources = sourcesHash();
  const cacheDir = join(ROOT, 'gpu-learner', 'build');
  const cache = join(cacheDir, `.kernel-report-${createHash('sha256').update(version).update(sources).digest('hex').slice(0, 16)}.json`);
  if (existsSync(cache)) return { report: JSON.parse(readFileSync(cache, 'utf8')), cached: true, seconds: (Date.now() - t0) / 1000 };
  const tmp = mkdtempSync(join(tmpdir(), 'gl-ptxas-'));
  try {
    const kernels = KERNEL_FILES.flatMap((f) => {
      const r = spawnSync(nvcc, [...flags, join(CUDA_SRC, f), '-o', join(tmp, `${f}.cubin`)], { encoding: 'utf8', maxBuffer: 64 << 20 });
      if (r.status !== 0) throw new Error(`nvcc ${f} failed:\n${r.stdout}${r.stderr}`);
      return parse(r.stdout + r.stderr, f);
    });
    const report: KernelReport = { nvcc: version, arch: ARCH, sources, kernels };
    mkdirSync(cacheDir, { recursive: true });
    writeFileSync(cache, JSON.stringify(report, null, 1));
    return { report, cached: false, seconds: (Date.now() - t0) / 1000 };
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

export function table(r: KernelReport): string {
  const rows = r.kernels.map((k) => [k.kernel, String(k.registers), String(k.spillStores), String(k.spillLoads), String(k.stackFrame), String(k.smem)]);
  const head = ['kernel', 'registers', 'spill stores B', 'spill loads B', 'stack frame B', 'static smem B'];
  const w = head.map((x, i) => Math.max(x.length, ...rows.map((r) => r[i].length)));
  return [head, ...rows].map((r) => r.map((x, i) => (i ? x.padStart(w[i]) : x.padEnd(w[i]))).join('  ')).join('\n');
}

/** Kernels that spill more than recorded (or are new and spill); [] when the nvcc versions differ (not comparable). */
export function newSpills(r: KernelReport, baseline: KernelReport): string[] {
  if (baseline.nvcc !== r.nvcc || baseline.arch !== r.arch) return [];
  const base = new Map(baseline.kernels.map((k) => [k.kernel, k]));
  return r.kernels
    .filter((k) => k.spillStores + k.spillLoads > (base.get(k.kernel)?.spillStores ?? 0) + (base.get(k.kernel)?.spillLoads ?? 0))
    .map(
      (k) =>
        `${k.kernel}: ${k.spillStores} B spill stores, ${k.spillLoads} B spill loads (recorded: ${base.get(k.kernel)?.spillStores ?? 'none'}/${base.get(k.kernel)?.spillLoads ?? 'none'})`,
    );
}

/** The facts for the current sources: the record when it matches them, else compiled with nvcc (undefined: no nvcc). */
export function currentReport(): { report: KernelReport; how: string } | undefined {
  const rec = recordedReport();
  if (rec) return { report: rec, how: 'recorded for these sources' };
  const nvcc = findNvcc();
  if (!nvcc) return undefined;
  const r = kernelReport(nvcc);
  return { report: r.report, how: r.cached ? 'compiled earlier, cached' : `compiled in ${r.seconds.toFixed(0)} s` };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  if (process.argv.includes('--needs-nvcc')) {
    // for setup.sh: only download the compiler when the record is stale
    console.log(recordedReport() ? 'no' : 'yes');
    process.exit(0);
  }
  const update = process.argv.includes('--update');
  const nvcc = findNvcc();
  const cur = update ? (nvcc ? { report: kernelReport(nvcc).report, how: 'compiled' } : undefined) : currentReport();
  if (!cur) {
    console.log('cuda-kernel-report: the recorded facts are for other sources and there is no nvcc (bash scripts/ensure-cuda-toolchain.sh --compiler); skipped');
    process.exit(0);
  }
  const report = cur.report;
  console.log(`${report.nvcc}, ${report.arch} (${cur.how})\n${table(report)}`);
  const jsonOut = process.argv.indexOf('--json');
  if (jsonOut > 0) writeFileSync(process.argv[jsonOut + 1], JSON.stringify(report, null, 1));
  if (update) {
    writeFileSync(BASELINE, JSON.stringify(report, null, 1) + '\n');
    console.log(`recorded in ${BASELINE}`);
  } else if (existsSync(BASELINE)) {
    const worse = newSpills(report, JSON.parse(readFileSync(BASELINE, 'utf8')));
    if (worse.length) {
      console.log(`\nkernels spilling more than recorded in ${BASELINE}:\n  ${worse.join('\n  ')}\n(intended? rerun with --update)`);
      process.exit(1);
    }
  }
}
