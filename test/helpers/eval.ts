// Evaluation test helpers: which episode a scripted model is asked for, from the request's seed.
import { evalEpisodeSeed } from '../../lib/seed.ts';
import { turnSeed } from '../../lib/episode.ts';
import type { ScriptContext } from './scripted-agent.ts';

/** seed → (task, run, turn) for every episode of an evaluation with this seed (the episode loop's turn seeds). */
export function seedTable(seed: number, taskIds: readonly string[], runs: number, maxTurns = 40): (s: number) => ScriptContext | undefined {
  const m = new Map<number, ScriptContext>();
  for (const taskId of taskIds) {
    for (let run = 0; run < runs; run++) {
      const es = evalEpisodeSeed(seed, taskId, run);
      for (let turn = 0; turn < maxTurns; turn++) m.set(turnSeed(es, turn), { taskId, run, turn });
    }
  }
  return (s) => m.get(s);
}
