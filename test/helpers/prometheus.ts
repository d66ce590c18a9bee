// A real Prometheus server (Debian's, installed by scripts/ensure-monitoring.sh) on loopback, scraping
// the given targets every second, queried through its HTTP API.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, openSync, closeSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freePort } from '../../services/temporal-server.ts';
import { waitFor } from './temporal.ts';

export interface PromSample {
  metric: Record<string, string>;
  value: number;
}

export interface PrometheusServer {
  url: string;
  /** an instant query's samples */
  query(q: string): Promise<PromSample[]>;
  stop(): Promise<void>;
}

export async function startPrometheus(dir: string, targets: string[]): Promise<PrometheusServer> {
  mkdirSync(dir, { recursive: true });
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const config = join(dir, 'prometheus.yml');
  writeFileSync(
    config,
    [
      'global: { scrape_interval: 1s, evaluation_interval: 1s }',
      'scrape_configs:',
      '  - job_name: swerl-worker',
      `    static_configs: [{ targets: [${targets.map((x) => `'${x}'`).join(', ')}] }]`,
      '',
    ].join('\n'),
  );
  const fd = openSync(join(dir, 'prometheus.log'), 'a');
  const child: ChildProcess = spawn(
    'prometheus',
    [`--config.file=${config}`, `--storage.tsdb.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn'],
    { stdio: ['ignore', fd, fd] },
  );
  closeSync(fd);
  child.on('error', () => undefined);
  await waitFor(`prometheus at ${url} (log ${join(dir, 'prometheus.log')})`, async () => (await fetch(`${url}/-/ready`)).ok, 60_000, 200);
  return {
    url,
    async query(q) {
      const res = await fetch(`${url}/api/v1/query?query=${encodeURIComponent(q)}`);
      const body = (await res.json()) as { status: string; error?: string; data: { result: { metric: Record<string, string>; value: [number, string] }[] } };
      if (body.status !== 'success') throw new Error(`prometheus query ${q}: ${body.error}`);
      return body.data.result.map((r) => ({ metric: r.metric, value: Number(r.value[1]) }));
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    },
  };
}
