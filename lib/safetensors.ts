// safetensors encoding (https://huggingface.co/docs/safetensors): u64 LE header length, a JSON header
// space-padded to a multiple of 8 bytes, then the tensors' bytes in order. Pure: callers write the file.

export type StDtype = 'F32' | 'BF16' | 'F16';

export interface NamedTensor {
  name: string;
  shape: number[];
  /** an Int32Array is stored as I32 as it is, whatever the dtype option */
  data: Float32Array | Int32Array;
}

/** f32 → bf16 bits, round to nearest even (NaN kept quiet). */
export function f32ToBf16(x: Float32Array): Uint16Array {
  const u = new Uint32Array(x.buffer, x.byteOffset, x.length);
  const out = new Uint16Array(x.length);
  for (let i = 0; i < x.length; i++) {
    const v = u[i];
    if ((v & 0x7fffffff) > 0x7f800000) out[i] = (v >>> 16) | 0x40;
    else out[i] = (v + 0x7fff + ((v >>> 16) & 1)) >>> 16;
  }
  return out;
}

/** f32 → IEEE half bits, round to nearest even, overflow to ±inf. */
export function f32ToF16(x: Float32Array): Uint16Array {
  const u = new Uint32Array(x.buffer, x.byteOffset, x.length);
  const out = new Uint16Array(x.length);
  for (let i = 0; i < x.length; i++) {
    const v = u[i],
      sign = (v >>> 16) & 0x8000,
      exp = (v >>> 23) & 0xff,
      man = v & 0x7fffff;
    if (exp === 0xff) {
      out[i] = sign | 0x7c00 | (man ? 0x200 : 0);
      continue;
    }
    const e = exp - 127 + 15;
    if (e >= 31) {
      out[i] = sign | 0x7c00;
      continue;
    }
    if (e <= 0) {
      if (e < -10) {
        out[i] = sign;
        continue;
      }
      const m = man | 0x800000,
        shift = 14 - e;
      let h = m >>> shift;
      const rem = m & ((1 << shift) - 1),
        half = 1 << (shift - 1);
      if (rem > half || (rem === half && h & 1)) h++;
      out[i] = sign | h;
      continue;
    }
    let h = (e << 10) | (man >>> 13);
    const rem = man & 0x1fff;
    if (rem > 0x1000 || (rem === 0x1000 && h & 1)) h++;
    out[i] = sign | h;
  }
  return out;
}

export interface EncodeOptions {
  /** stored dtype; values are converted from f32 (default F32) */
  dtype?: StDtype;
  /** the header's __metadata__ (string values); omitted when absent */
  metadata?: Record<string, string>;
}

/** The file's bytes as pieces to write in order: length, header, then each tensor's data. */
export function encodeSafetensors(tensors: NamedTensor[], opts: EncodeOptions = {}): Buffer[] {
  const dtype = opts.dtype ?? 'F32';
  const header: Record<string, unknown> = opts.metadata ? { __metadata__: opts.metadata } : {};
  const blobs: Buffer[] = [];
  let offset = 0;
  for (const t of tensors) {
    const numel = t.shape.reduce((a, b) => a * b, 1);
    if (numel !== t.data.length) throw new RangeError(`safetensors: tensor ${t.name}: shape [${t.shape}] needs ${numel} values, got ${t.data.length}`);
    const d = t.data;
    const raw = d instanceof Int32Array || dtype === 'F32' ? d : dtype === 'BF16' ? f32ToBf16(d) : f32ToF16(d);
    header[t.name] = { dtype: d instanceof Int32Array ? 'I32' : dtype, shape: t.shape, data_offsets: [offset, offset + raw.byteLength] };
    blobs.push(Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength));
    offset += raw.byteLength;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (Buffer.byteLength(json) % 8)) % 8);
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(Buffer.byteLength(json)));
  return [length, Buffer.from(json, 'utf8'), ...blobs];
}

/** Tensors of a safetensors file's bytes (F32 and I32; others are refused by name). */
export function decodeSafetensors(buf: Buffer): Map<string, { shape: number[]; data: Float32Array | Int32Array }> {
  if (buf.length < 8) throw new RangeError(`safetensors: ${buf.length} bytes, no header`);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8')) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
  const out = new Map<string, { shape: number[]; data: Float32Array | Int32Array }>();
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const [a, b] = t.data_offsets;
    const bytes = buf.subarray(8 + n + a, 8 + n + b);
    const copy = new Uint8Array(bytes); // aligned
    if (t.dtype === 'F32') out.set(name, { shape: t.shape, data: new Float32Array(copy.buffer) });
    else if (t.dtype === 'I32') out.set(name, { shape: t.shape, data: new Int32Array(copy.buffer) });
    else throw new RangeError(`safetensors: tensor ${name} has dtype ${t.dtype} (F32 and I32 are read here)`);
  }
  return out;
}
