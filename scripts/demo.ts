// `npm run demo [-- --out DIR]`: trains the FrozenLake policy from random weights through the whole
// durable stack (embedded Temporal dev server + worker), then reports the reward curve.
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { train } from './commands/train.ts';
import { reportFailure } from './cli-log.ts';

const { values } = parseArgs({ options: { out: { type: 'string' }, iterations: { type: 'string' } } });
const root = fileURLToPath(new URL('..', import.meta.url));
const out = values.out ?? join(root, 'runs', `demo-${new Date().toISOString().replace(/[:.]/g, '-')}`);
const iterations = values.iterations === undefined ? undefined : Number(values.iterations);
if (iterations !== undefined && !(Number.isInteger(iterations) && iterations >= 1)) {
  console.error(`demo: --iterations: must be a positive integer, got ${JSON.stringify(values.iterations)}`);
  process.exit(2);
}
process.env.PATH = `${join(root, '.tools', 'bin')}:${process.env.PATH ?? ''}`;

const started = Date.now();
console.log(`FrozenLake GRPO++ demo: configs/frozenlake.json, output in ${out}`);
const o = await train({ config: join(root, 'configs', 'frozenlake.json'), out, iterations }).catch((e: unknown) => {
  reportFailure('demo', e);
  process.exit(1);
});
const ms = o.metrics;
const fifth = Math.max(1, Math.floor(ms.length / 5));
const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
const first = mean(ms.slice(0, fifth).map((m) => m.successRate));
const last = mean(ms.slice(-fifth).map((m) => m.successRate));
console.log('');
console.log(`${ms.length} iterations in ${((Date.now() - started) / 60000).toFixed(1)} min; final checkpoint ${o.result.checkpoint}`);
console.log(`success rate: first fifth ${(100 * first).toFixed(1)}%  →  last fifth ${(100 * last).toFixed(1)}%`);
console.log(`metrics: ${o.metricsPath}`);
console.log(`plot: ${o.plotPaths.join('  ')}`);
console.log('');
console.log('Next: SWE tasks run the same workflows with `"env": {"kind": "swe", ...}` in a config:');
console.log('  npm run setup -- --docker && swerl train --config <your-swe-config.json>   (see README.md)');
