// The mechanical rewrite that lets g++ compile a .cu file against gl-emu (emu/include): line numbers kept
// (#line points at the original file, by its path in the repository, so the generated file is the same in every clone
// and ccache reuses its object), nothing else touched.
//   kernel<<<grid, block[, smem[, stream]]>>>(args)  →  ::gl_emu::Launch("kernel", __FILE__, __LINE__, grid, block, ...).run(kernel, args)
//   __shared__ T name[N];                            →  GL_EMU_SHARED(T, name, [N]);
//   extern __shared__ T name[];                      →  GL_EMU_EXTERN_SHARED(T, name);
// Usage: node rewrite.mjs IN.cu OUT.cpp [--mutant NAME]   (--mutant: apply one planted bug from mutants.json first)
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { dirname, resolve, basename, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '..', '..');

export function applyMutant(text, file, name) {
  const mutants = JSON.parse(readFileSync(join(here, 'mutants.json'), 'utf8'));
  const m = mutants.find((x) => x.name === name);
  if (!m) throw new Error(`unknown mutant ${name}`);
  if (m.file !== basename(file)) return text;
  for (const e of m.edits) {
    const n = text.split(e.find).length - 1;
    if (n !== 1) throw new Error(`mutant ${name}: ${JSON.stringify(e.find)} occurs ${n} times in ${m.file} (must be exactly once; update mutants.json)`);
    if (e.find.split('\n').length !== e.replace.split('\n').length) throw new Error(`mutant ${name}: a replacement must keep the line count`);
    text = text.replace(e.find, () => e.replace);
  }
  return text;
}

export function rewrite(text, file) {
  let out = text;
  out = out.replace(/extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([A-Za-z_][\w:]*)\s+([A-Za-z_]\w*)\s*\[\s*\]\s*;/g, 'GL_EMU_EXTERN_SHARED($1, $2);');
  out = out.replace(/__shared__\s+([A-Za-z_][\w:]*)\s+([A-Za-z_]\w*)\s*((?:\[[^\]\n;]+\])+)\s*;/g, 'GL_EMU_SHARED($1, $2, $3);');
  out = out.replace(
    /([A-Za-z_][\w:]*(?:<[^<>;()\n]*>)?)\s*<<<([^;]*?)>>>\s*\(\s*(\)?)/g,
    (_m, k, cfg, close) => `::gl_emu::Launch(${JSON.stringify(k)}, __FILE__, __LINE__, ${cfg.trim()}).run(${k}${close ? ')' : ', '}`,
  );
  const code = out.replace(/"(?:[^"\\\n]|\\.)*"/g, '""').replace(/\/\/.*$/gm, '');
  for (const bad of ['__shared__', '<<<', '>>>'])
    if (code.includes(bad)) {
      const line = code.slice(0, code.indexOf(bad)).split('\n').length;
      throw new Error(`${file}:${line}: "${bad}" in a form the gl-emu rewrite does not handle`);
    }
  return `#line 1 ${JSON.stringify(relative(repo, resolve(file)))}\n${out}`;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const [input, output, flag, mutant] = process.argv.slice(2);
  if (!input || !output || (flag && (flag !== '--mutant' || !mutant))) {
    console.error('usage: node rewrite.mjs IN.cu OUT.cpp [--mutant NAME]');
    process.exit(2);
  }
  try {
    let text = readFileSync(input, 'utf8');
    if (mutant) text = applyMutant(text, input, mutant);
    const res = rewrite(text, input);
    mkdirSync(dirname(output), { recursive: true });
    writeFileSync(output, res);
  } catch (e) {
    console.error(`gl-emu rewrite: ${e.message}`);
    process.exit(1);
  }
}
