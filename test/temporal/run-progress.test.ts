// A run as its users watch it: one trainingRun row in the Temporal UI (plus its iteration children),
// current details that follow the iterations, plots redrawn in the store after each iteration, `swerl
// report`, and headless-Chromium screenshots of the run list and the run page (SWERL_SCREENSHOT_DIR keeps them).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PNG } from 'pngjs';
import { tinyConfig, useTemporalWithWorker, waitFor, type TestTemporal } from '../helpers/temporal.ts';
import { launchChromium } from '../helpers/browser.ts';
import { seriesIterations } from '../helpers/plots.ts';
import { pauseSignal, resumeSignal, statusQuery } from '../../workflows/signals.ts';
import type { TrainingRunResult } from '../../lib/training/shapes.ts';
import { openStore, keys } from '../../lib/store.ts';
import { readMetricsLines } from '../../activities/report.ts';
import { report } from '../../scripts/commands/report.ts';
import { RUN_SAVED_VIEWS, uiViewsScript } from '../../lib/temporal-ui.ts';

let t: TestTemporal;
useTemporalWithWorker((x) => (t = x), undefined, { ui: true });

async function count(query: string): Promise<number> {
  let n = 0;
  for await (const _ of t.client.workflow.list({ query })) n++;
  return n;
}

async function currentDetails(workflowId: string): Promise<string> {
  const md = await t.client.workflow.getHandle(workflowId).query<{ currentDetails?: string }>('__temporal_workflow_metadata');
  return md.currentDetails ?? '';
}

/** A screenshot that decodes, has the viewport's size and is not one flat colour. */
function assertScreenshot(path: string): void {
  const png = PNG.sync.read(readFileSync(path));
  assert.ok(png.width >= 1000 && png.height >= 600, `${path}: ${png.width}×${png.height}`);
  const colours = new Set<number>();
  for (let i = 0; i < png.data.length; i += 4 * 97) colours.add(png.data.readUInt32BE(i));
  assert.ok(colours.size > 20, `${path}: ${colours.size} colours sampled, a blank page?`);
}

test('a 6-iteration run is one trainingRun row with live current details, plots in the store, a report and UI screenshots', async () => {
  const runId = 'progress-6';
  const config = tinyConfig(t.dir, { runId, iterations: 6 });
  const h = await t.client.workflow.start('trainingRun', {
    taskQueue: 'learner',
    workflowId: runId,
    args: [config],
    staticSummary: 'frozenlake training run: 6 iterations of 4 tasks × 2 samples',
  });
  const shots = process.env.SWERL_SCREENSHOT_DIR ?? join(t.dir, 'screenshots');
  mkdirSync(shots, { recursive: true });
  const browser = await launchChromium();
  try {
    // while it runs: the details name the newest finished iteration and its reward; paused after
    // iteration 3 so the page is taken of an open run however slow the machine is
    await waitFor('iteration 3 done', async () => (await h.query(statusQuery)).iteration >= 3);
    await h.signal(pauseSignal);
    const st = await waitFor('paused', async () => {
      const s = await h.query(statusQuery);
      return s.phase === 'paused' ? s : null;
    });
    const running = await currentDetails(runId);
    assert.match(running, new RegExp(`\\*\\*${st.iteration}\\*\\* of 6 iterations done · \`paused\``), running);
    const page = await browser.page();
    await page.addInitScript(uiViewsScript('default'));
    const { runId: execution } = await h.describe();
    await page.goto(`${t.server.uiUrl}/namespaces/default/workflows/${runId}/${execution}/user-metadata`, { waitUntil: 'load' });
    // the UI renders current details (markdown) in a frame of its own, re-rendered as they change
    const shown = await waitFor(
      'the current details in the run page',
      async () => {
        for (const f of page.frames().filter((x) => x.url().includes('/render?content='))) {
          const text = await f.evaluate(() => document.body.innerText).catch(() => '');
          if (text.includes('iterations done')) return text;
        }
        return null;
      },
      120_000,
    );
    assert.match(shown, /reward \d\.\d{3}/);
    await page.screenshot({ path: join(shots, 'run-page.png') });
    await h.signal(resumeSignal);

    const result = (await h.result()) as TrainingRunResult;
    assert.equal(result.iterations, 6);

    // one row for the run, six for its iterations (visibility is eventually consistent)
    await waitFor(
      'visibility',
      async () => (await count(`WorkflowId = '${runId}'`)) === 1 && (await count(`WorkflowType = 'rlIteration' AND WorkflowId STARTS_WITH '${runId}-iter-'`)) === 6,
    );
    assert.equal(await count(`WorkflowType = 'trainingRun' AND WorkflowId = '${runId}'`), 1, 'no continue-as-new rows');

    const store = openStore(config.store.url);
    const lines = await readMetricsLines(store, runId);
    assert.deepEqual(
      lines.map((l) => l.iteration),
      [0, 1, 2, 3, 4, 5],
    );
    const last = lines.at(-1)!;
    const details = await currentDetails(runId);
    assert.ok(details.includes(`reward **${Number(last.meanReward).toFixed(3)}**`), details);
    assert.match(details, /\*\*6\*\* of 6 iterations done/);

    // the timeline names each rollout by its task and sample (the activity summary the UI shows)
    const events = (await t.client.workflow.getHandle(`${runId}-iter-5`).fetchHistory()).events ?? [];
    const rollouts = events.filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'rollout');
    const summaries = rollouts.map((e) => JSON.parse(Buffer.from(e.userMetadata?.summary?.data ?? []).toString('utf8') || 'null') as string | null);
    const inputs = rollouts.map(
      (e) => JSON.parse(Buffer.from(e.activityTaskScheduledEventAttributes!.input!.payloads![0].data!).toString('utf8')) as { taskId: string; sample: number },
    );
    assert.deepEqual(
      summaries,
      inputs.map((x) => `task ${x.taskId} · sample ${x.sample}`),
    );
    assert.equal(new Set(summaries).size, 4 * 2, 'every rollout of the iteration (4 tasks × 2 samples) named apart');

    // the workflow redrew the plots after each iteration: one point per iteration and series
    const svg = (await store.get(keys.plot(runId, 'reward.svg')))!.toString('utf8');
    assert.deepEqual(seriesIterations(svg, 'mean reward'), [0, 1, 2, 3, 4, 5]);
    assert.ok(PNG.sync.read((await store.get(keys.plot(runId, 'reward.png')))!).width > 0);

    const out: string[] = [];
    const r = await report({ runId, store: config.store.url, log: (s) => out.push(s) });
    assert.match(out[0], new RegExp(`^run ${runId}: 6 iteration\\(s\\)`));
    assert.ok(
      out.some((l) => l.startsWith('reward ') && l.includes(Number(last.meanReward).toFixed(3))),
      out.join('\n'),
    );
    assert.ok(
      out.some((l) => l.startsWith('plots ') && l.includes('reward.png')),
      out.join('\n'),
    );
    assert.ok(r.plots.every((p) => p.startsWith(store.dirFor(keys.plots(runId)))));

    // the list as a run dashboard: the saved view's query, RL columns
    await page.goto(`${t.server.uiUrl}/namespaces/default/workflows?query=${encodeURIComponent(RUN_SAVED_VIEWS[0].query)}`, { waitUntil: 'load' });
    await page.getByText(runId, { exact: true }).first().waitFor();
    await page.getByText('RlMeanReward').first().waitFor();
    const text = await page.evaluate(() => document.body.innerText);
    for (const col of ['RlIteration', 'RlPhase', 'RlMeanReward']) assert.ok(text.includes(col), `list column ${col}`);
    assert.ok(!text.includes(`${runId}-iter-`), 'the saved view lists runs only');
    await page.screenshot({ path: join(shots, 'run-list.png') });
    for (const f of ['run-page.png', 'run-list.png']) assertScreenshot(join(shots, f));
  } finally {
    await browser.close();
  }
});

test('continueAsNewEvery: a run continues-as-new every K iterations and carries its state', async () => {
  const runId = 'progress-can';
  const config = tinyConfig(t.dir, { runId, iterations: 3, continueAsNewEvery: 2, batch: { tasks: 2, samples: 2 } });
  const result = (await t.client.workflow.execute('trainingRun', { taskQueue: 'learner', workflowId: runId, args: [config] })) as TrainingRunResult;
  assert.equal(result.iterations, 3);
  assert.deepEqual(
    result.recent.map((r) => r.iteration),
    [0, 1, 2],
    'recent metrics carried across the continue-as-new',
  );
  await waitFor('two executions', async () => (await count(`WorkflowId = '${runId}'`)) === 2);
});
