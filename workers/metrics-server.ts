// The worker's Prometheus endpoint: GET /metrics serves our metrics (lib/metrics.ts) followed by
// the Temporal SDK's own worker metrics, which its core exports on a loopback port of their own
// (Runtime telemetryOptions); one scrape target per worker process.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { registry } from '../lib/metrics.ts';

export interface MetricsServer {
  url: string;
  port: number;
  close(): Promise<void>;
}

export interface MetricsServerOptions {
  host?: string;
  port: number;
  /** the SDK core's Prometheus exporter, e.g. http://127.0.0.1:43121/metrics */
  sdkMetricsUrl?: string;
}

async function sdkMetrics(url: string): Promise<string> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(2000) });
    if (!res.ok) return `# Temporal SDK metrics at ${url}: HTTP ${res.status}\n`;
    return await res.text();
  } catch (e) {
    return `# Temporal SDK metrics at ${url}: ${(e as Error).message}\n`;
  }
}

export async function startMetricsServer(o: MetricsServerOptions): Promise<MetricsServer> {
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' || path !== '/metrics') {
      res.writeHead(path === '/metrics' ? 405 : 404, { 'content-type': 'text/plain' }).end('GET /metrics\n');
      return;
    }
    void (async () => {
      try {
        const [ours, sdk] = await Promise.all([registry.metrics(), o.sdkMetricsUrl ? sdkMetrics(o.sdkMetricsUrl) : Promise.resolve('')]);
        const body = ours.endsWith('\n') ? ours + sdk : `${ours}\n${sdk}`;
        res.writeHead(200, { 'content-type': registry.contentType }).end(body);
      } catch (e) {
        res.writeHead(500, { 'content-type': 'text/plain' }).end(`${(e as Error).message}\n`);
      }
    })();
  });
  const host = o.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}/metrics`,
    port,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

/**
 * For a worker process: installs the SDK runtime with its Prometheus exporter on a free loopback port,
 * then serves both on `host:port`. Call before any connection or worker is created. When a runtime is
 * installed already (an embedding process), only our metrics are served.
 */
export async function startWorkerMetrics(o: { host?: string; port: number }): Promise<MetricsServer & { sdk: boolean }> {
  const { Runtime } = await import('@temporalio/worker');
  const { freePort } = await import('../services/temporal-server.ts');
  const sdkPort = await freePort('127.0.0.1');
  let sdk = true;
  try {
    Runtime.install({ telemetryOptions: { metrics: { prometheus: { bindAddress: `127.0.0.1:${sdkPort}` } } } });
  } catch {
    sdk = false;
  }
  const server = await startMetricsServer({ host: o.host, port: o.port, ...(sdk ? { sdkMetricsUrl: `http://127.0.0.1:${sdkPort}/metrics` } : {}) });
  return { ...server, sdk };
}
