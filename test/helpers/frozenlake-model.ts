// A FrozenLake-preset checkpoint for a test file's episodes (the character vocabulary, one token per action).
import { after, before } from 'node:test';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateMap } from '../../lib/envs/frozenlake.ts';
import { writeModel } from '../../lib/model-init.ts';
import { loadTokenizer, type Tokenizer } from '../../lib/tokenizer.ts';

export interface FrozenLakeModel {
  /** the file's temporary directory (the model is in `model` under it) */
  dir: string;
  /** the checkpoint directory */
  model: string;
  tok: Tokenizer;
}

/** Writes the frozenlake preset (seed 3) before the file's tests and removes it after; the fields are set by then. */
export function useFrozenLakeModel(prefix: string): FrozenLakeModel {
  const m = { dir: '', model: '' } as FrozenLakeModel;
  before(async () => {
    m.dir = await mkdtemp(join(tmpdir(), prefix));
    m.model = join(m.dir, 'model');
    await writeModel(m.model, 'frozenlake', 3);
    m.tok = await loadTokenizer(m.model);
  });
  after(() => rm(m.dir, { recursive: true, force: true }));
  return m;
}

/** The first map seed with no hole: every episode on it can only end by its step limit or the goal. */
export function openSeed(): number {
  for (let s = 0; ; s++) if (generateMap(s).every((r) => r.every((c) => c !== 'H'))) return s;
}
