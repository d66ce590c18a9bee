// Evaluation test helpers: which episode a scripted model is asked for, from the request's seed.
import { evalEpisodeSeed } from '../../lib/seed.ts';
import { turnSeed } from '../../lib/episode.ts';
import type { EvalConfigInput } from '../../lib/eval/config.ts';
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

/** An evaluation of the scripted chat model at `url` (test/helpers/scripted-agent.ts): 20 steps, stored at `storeUrl`; `over` sets the rest. */
export function scriptedEvalConfig(url: string, tasksFile: string, storeUrl: string, over: Partial<EvalConfigInput> & { tasks: string[] }): EvalConfigInput {
  return { tasksFile, model: { baseUrl: url, model: 'scripted', api: 'chat' }, maxSteps: 20, store: { url: storeUrl }, ...over };
}
