// The one file swerl adds beside a tied Hugging Face checkpoint so that vLLM loads a real output head
// (untiedHeadFile), and the checks of a checkpoint directory's layout it rests on.
import { existsSync } from 'node:fs';
import { open, readFile, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** Whether the checkpoint's config.json ties the output head to the embeddings. */
export async function isTied(dir: string): Promise<boolean> {
  try {
    const c = JSON.parse(await readFile(join(dir, 'config.json'), 'utf8')) as { tie_word_embeddings?: boolean };
    return c.tie_word_embeddings === true;
  } catch {
    return false;
  }
}

/** The file beside a tied checkpoint's weights that holds its output head explicitly (vLLM loads every *.safetensors). */
export const UNTIED_HEAD_FILE = 'lm_head.safetensors';
const EMBED = 'model.embed_tokens.weight';

/** The safetensors file of `dir` that holds `tensor` (sharded: from model.safetensors.index.json). */
async function fileHolding(dir: string, tensor: string): Promise<string> {
  const index = join(dir, 'model.safetensors.index.json');
  if (existsSync(index)) {
    const map = (JSON.parse(await readFile(index, 'utf8')) as { weight_map?: Record<string, string> }).weight_map ?? {};
    const f = map[tensor];
    if (!f) throw new Error(`${index}: no ${tensor} in weight_map`);
    return join(dir, f);
  }
  const single = join(dir, 'model.safetensors');
  if (existsSync(single)) return single;
  const any = (await readdir(dir)).filter((f) => f.endsWith('.safetensors') && f !== UNTIED_HEAD_FILE);
  if (any.length !== 1) throw new Error(`${dir}: cannot tell which safetensors file holds ${tensor} (${any.join(', ') || 'none'})`);
  return join(dir, any[0]!);
}

/**
 * Writes `dir/lm_head.safetensors` holding `lm_head.weight` = the bytes of `model.embed_tokens.weight` (same dtype
 * and shape) when the checkpoint is tied and the file is missing or stale; atomic (temp file + rename). A vLLM
 * started with `--hf-overrides '{"tie_word_embeddings": false}'` then loads and reloads a real head; the native
 * engine and transformers read only model.safetensors (or the index) and never see the file. Returns its path, or
 * null for an untied model.
 */
export async function untiedHeadFile(dir: string): Promise<string | null> {
  if (!(await isTied(dir))) return null;
  const out = join(dir, UNTIED_HEAD_FILE);
  const src = await fileHolding(dir, EMBED);
  const fh = await open(src, 'r');

  let bytes: Buffer;
  try {
    const lenBuf = Buffer.alloc(8);
    await fh.read(lenBuf, 0, 8, 0);
    const hlen = Number(lenBuf.readBigUInt64LE(0));
    const hbuf = Buffer.alloc(hlen);
    await fh.read(hbuf, 0, hlen, 8);
    const header = JSON.parse(hbuf.toString('utf8')) as Record<string, unknown>;
    const e = header[EMBED] as { dtype: string; shape: number[]; data_offsets: [number, number] } | undefined;
    if (!e) throw new Error(`${src}: no ${EMBED}`);
    bytes = Buffer.alloc(e.data_offsets[1] - e.data_offsets[0]);
    await fh.read(bytes, 0, bytes.length, 8 + hlen + e.data_offsets[0]);
    const h = Buffer.from(
      JSON.stringify({
        __metadata__: { format: 'pt', swerl: `output head = ${EMBED} of this checkpoint (tied), for vLLM` },
        'lm_head.weight': { dtype: e.dtype, shape: e.shape, data_offsets: [0, bytes.length] },
      }),
    );
    const pad = (8 - (h.length % 8)) % 8;
    const hdr = Buffer.concat([h, Buffer.alloc(pad, 0x20)]);
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(hdr.length));
    if (existsSync(out)) {
      const cur = await readFile(out);
      if (cur.length === 8 + hdr.length + bytes.length && cur.subarray(8 + hdr.length).equals(bytes)) return out;
    }
    const tmp = `${out}.tmp-${process.pid}-${Date.now()}`;
    try {
      await writeFile(tmp, Buffer.concat([len, hdr, bytes]));
      await rename(tmp, out);
    } catch (err) {
      await rm(tmp, { force: true });
      throw err;
    }
    return out;
  } finally {
    await fh.close();
  }
}
