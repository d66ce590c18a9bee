// The episode tests' fixtures: a FrozenLake-preset checkpoint (the character vocabulary, one token per action) and
// an environment that records what it was asked to run.
import { after, before } from 'node:test';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateMap } from '../../lib/envs/frozenlake.ts';
import { writeModel } from '../../lib/model-init.ts';
import { loadTokenizer, type Tokenizer } from '../../lib/tokenizer.ts';
import type { TextEnvironment } from '../../lib/types.ts';

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

/**
 * An environment with a system and a user message that records the actions it ran and ends after `steps`;
 * its reward is `reward` (by default 1, graded).
 */
export function recordingEnv(steps: number, reward: { reward: number; info?: Record<string, unknown> } = { reward: 1, info: { graded: true } }) {
  const seen: string[] = [];
  const env: TextEnvironment & { seen: string[] } = {
    seen,
    async reset() {
      return [
        { role: 'system', content: 'the environment prompt' },
        { role: 'user', content: 'task' },
      ];
    },
    async step(action) {
      seen.push(action);
      return { observation: `result ${seen.length}`, done: seen.length >= steps };
    },
    async reward() {
      return reward;
    },
    async close() {},
  };
  return env;
}
