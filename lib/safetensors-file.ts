// Reading safetensors files and checkpoint directories tensor by tensor (lib/safetensors.ts encodes and decodes
// buffers): checkpoints past 2 GiB (Qwen2.5-0.5B in fp32, its gradients) cannot be read into one Buffer.
import { closeSync, existsSync, openSync, readFileSync, readSync } from 'node:fs';
import { join } from 'node:path';

interface HeaderEntry {
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
}

/** Tensors of one safetensors file, read one at a time (files past 2 GiB, which readFile cannot hold). F32, BF16 and I32. */
export interface SafetensorsReader {
  readonly names: string[];
  shape(name: string): number[];
  read(name: string): Float32Array | Int32Array;
  close(): void;
}

export function openSafetensors(path: string): SafetensorsReader {
  const fd = openSync(path, 'r');
  const lenBuf = Buffer.alloc(8);
  readSync(fd, lenBuf, 0, 8, 0);
  const n = Number(lenBuf.readBigUInt64LE(0));
  const hbuf = Buffer.alloc(n);
  readSync(fd, hbuf, 0, n, 8);
  const header = JSON.parse(hbuf.toString('utf8')) as Record<string, HeaderEntry>;
  delete header.__metadata__;
  const entry = (name: string): HeaderEntry => {
    const e = header[name];
    if (!e) throw new RangeError(`safetensors: ${path} has no tensor ${name}`);
    return e;
  };
  return {
    names: Object.keys(header),
    shape: (name) => entry(name).shape,
    read(name) {
      const e = entry(name);
      const [a, b] = e.data_offsets;
      const bytes = new Uint8Array(b - a);
      for (let done = 0; done < bytes.length;) done += readSync(fd, bytes, done, bytes.length - done, 8 + n + a + done);
      if (e.dtype === 'F32') return new Float32Array(bytes.buffer);
      if (e.dtype === 'I32') return new Int32Array(bytes.buffer);
      if (e.dtype === 'BF16') {
        const h = new Uint16Array(bytes.buffer);
        const u = new Uint32Array(h.length);
        for (let i = 0; i < h.length; i++) u[i] = h[i]! << 16;
        return new Float32Array(u.buffer);
      }
      throw new RangeError(`safetensors: tensor ${name} of ${path} has dtype ${e.dtype} (F32, BF16 and I32 are read here)`);
    },
    close: () => closeSync(fd),
  };
}

/** Every tensor of a checkpoint directory (model.safetensors, or shards listed by model.safetensors.index.json), lazily. */
export function openCheckpointTensors(dir: string): SafetensorsReader {
  const index = join(dir, 'model.safetensors.index.json');
  const files = existsSync(index)
    ? [...new Set(Object.values((JSON.parse(readFileSync(index, 'utf8')) as { weight_map: Record<string, string> }).weight_map))]
    : ['model.safetensors'];
  const readers = files.map((f) => openSafetensors(join(dir, f)));
  const owner = new Map<string, SafetensorsReader>();
  for (const r of readers) for (const name of r.names) owner.set(name, r);
  const of = (name: string) => {
    const r = owner.get(name);
    if (!r) throw new RangeError(`safetensors: ${dir} has no tensor ${name}`);
    return r;
  };
  return { names: [...owner.keys()], shape: (name) => of(name).shape(name), read: (name) => of(name).read(name), close: () => readers.forEach((r) => r.close()) };
}
