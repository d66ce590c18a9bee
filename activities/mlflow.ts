// A small client of MLflow's tracking REST API (/api/2.0/mlflow/...) and its artifact proxy
// (/api/2.0/mlflow-artifacts/...), as the Python client uses them. Every request has a time limit, so
// a tracking server that hangs costs seconds, never the run.

export const MLFLOW_RUN_ID_TAG = 'swerl.run_id';
export const MLFLOW_EVAL_ID_TAG = 'swerl.eval_id';

/** A failed call: HTTP status (0 when the server could not be reached) and MLflow's error code. */
export class MlflowError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string,
  ) {
    super(message);
    this.name = 'MlflowError';
  }
  /** the server is unreachable or failing: try again later; anything else is our request's fault */
  get transient(): boolean {
    return this.status === 0 || this.status === 429 || this.status >= 500;
  }
}

export interface MlflowRunInfo {
  run_id: string;
  experiment_id: string;
  run_name?: string;
  status: string;
  start_time: number;
  end_time?: number;
  artifact_uri: string;
  lifecycle_stage: string;
}

export interface MlflowMetric {
  key: string;
  value: number;
  timestamp: number;
  step: number;
}
export interface MlflowKeyValue {
  key: string;
  value: string;
}

/** MLflow's limits per log-batch request. */
export const LOG_BATCH_LIMITS = { metrics: 1000, params: 100, tags: 100 } as const;

export class MlflowClient {
  readonly base: string;
  constructor(
    uri: string,
    readonly timeoutMs = 5000,
  ) {
    this.base = uri.replace(/\/+$/, '');
  }

  private async request<T>(method: 'GET' | 'POST' | 'PUT', path: string, body?: unknown, raw?: { data: Uint8Array; contentType: string }): Promise<T> {
    const url = `${this.base}${path}`;
    let res: Response;
    try {
      res = await fetch(url, {
        method,
        headers: raw ? { 'content-type': raw.contentType } : body === undefined ? {} : { 'content-type': 'application/json' },
        body: raw ? new Uint8Array(raw.data) : body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (e) {
      const c = (e as { cause?: { code?: string; message?: string; errors?: { code?: string }[] } }).cause;
      const why = c?.code ?? c?.errors?.[0]?.code ?? c?.message ?? (e as Error).message;
      throw new MlflowError(`MLflow ${method} ${url}: ${why}`, 0, 'UNREACHABLE');
    }
    const text = await res.text().catch(() => '');
    if (!res.ok) {
      let code = `HTTP_${res.status}`;
      let message = text.slice(0, 300);
      try {
        const j = JSON.parse(text) as { error_code?: string; message?: string };
        code = j.error_code ?? code;
        message = j.message ?? message;
      } catch {
        // not JSON: keep the text
      }
      throw new MlflowError(`MLflow ${method} ${path}: ${res.status} ${code}: ${message}`, res.status, code);
    }
    try {
      return (text ? JSON.parse(text) : {}) as T;
    } catch {
      throw new MlflowError(`MLflow ${method} ${path}: the answer is not JSON: ${text.slice(0, 120)}`, 502, 'BAD_RESPONSE');
    }
  }

  private api<T>(method: 'GET' | 'POST', path: string, body?: unknown): Promise<T> {
    return this.request<T>(method, `/api/2.0/mlflow/${path}`, body);
  }

  /** The experiment's id, created when missing (a concurrent creator's is used). */
  async experimentId(name: string): Promise<string> {
    const get = () => this.api<{ experiment: { experiment_id: string } }>('GET', `experiments/get-by-name?experiment_name=${encodeURIComponent(name)}`);
    try {
      return (await get()).experiment.experiment_id;
    } catch (e) {
      if (!(e instanceof MlflowError) || e.code !== 'RESOURCE_DOES_NOT_EXIST') throw e;
    }
    try {
      return (await this.api<{ experiment_id: string }>('POST', 'experiments/create', { name })).experiment_id;
    } catch (e) {
      if (e instanceof MlflowError && e.code === 'RESOURCE_ALREADY_EXISTS') return (await get()).experiment.experiment_id;
      throw e;
    }
  }

  /** Runs of the experiment whose `tag` is `value` (our run or evaluation id), oldest first. */
  async findRuns(experimentId: string, value: string, tag = MLFLOW_RUN_ID_TAG): Promise<MlflowRunInfo[]> {
    const r = await this.api<{ runs?: { info: MlflowRunInfo }[] }>('POST', 'runs/search', {
      experiment_ids: [experimentId],
      filter: `tags.\`${tag}\` = '${value.replace(/'/g, "\\'")}'`,
      run_view_type: 'ACTIVE_ONLY',
      order_by: ['attributes.start_time ASC'],
      max_results: 10,
    });
    return (r.runs ?? []).map((x) => x.info).sort((a, b) => a.start_time - b.start_time || a.run_id.localeCompare(b.run_id));
  }

  async createRun(experimentId: string, runName: string, startTime: number, tags: MlflowKeyValue[]): Promise<MlflowRunInfo> {
    const r = await this.api<{ run: { info: MlflowRunInfo } }>('POST', 'runs/create', { experiment_id: experimentId, run_name: runName, start_time: startTime, tags });
    return r.run.info;
  }

  async getRun(mlflowRunId: string): Promise<MlflowRunInfo> {
    return (await this.api<{ run: { info: MlflowRunInfo } }>('GET', `runs/get?run_id=${encodeURIComponent(mlflowRunId)}`)).run.info;
  }

  async deleteRun(mlflowRunId: string): Promise<void> {
    await this.api('POST', 'runs/delete', { run_id: mlflowRunId });
  }

  /** One log-batch request (the caller keeps within LOG_BATCH_LIMITS). Identical metrics are stored once by MLflow. */
  async logBatch(mlflowRunId: string, b: { metrics?: MlflowMetric[]; params?: MlflowKeyValue[]; tags?: MlflowKeyValue[] }): Promise<void> {
    await this.api('POST', 'runs/log-batch', { run_id: mlflowRunId, metrics: b.metrics ?? [], params: b.params ?? [], tags: b.tags ?? [] });
  }

  async updateRun(mlflowRunId: string, status: 'RUNNING' | 'FINISHED' | 'FAILED' | 'KILLED', endTime?: number): Promise<void> {
    await this.api('POST', 'runs/update', { run_id: mlflowRunId, status, ...(endTime !== undefined ? { end_time: endTime } : {}) });
  }

  /** Uploads one artifact through the server's artifact proxy (runs whose artifact URI is `mlflow-artifacts:`). */
  async uploadArtifact(artifactUri: string, path: string, data: Uint8Array, contentType: string): Promise<void> {
    const m = /^mlflow-artifacts:(?:\/\/[^/]*)?\/(.*)$/.exec(artifactUri);
    if (!m) throw new MlflowError(`artifact URI ${artifactUri} is not served by the tracking server (mlflow-artifacts:)`, 400, 'UNSUPPORTED_ARTIFACT_URI');
    const rel = [...m[1].split('/'), ...path.split('/')].filter(Boolean).map(encodeURIComponent).join('/');
    await this.request('PUT', `/api/2.0/mlflow-artifacts/artifacts/${rel}`, undefined, { data, contentType });
  }
}

/** MLflow key names take letters, digits, `_ - . / space`; anything else becomes `_`. */
export function mlflowKey(name: string): string {
  return name.replace(/[^A-Za-z0-9_\-./ ]/g, '_').slice(0, 250);
}

/** Numeric (and boolean) leaves of an object as `a/b` keys. */
export function numericLeaves(v: unknown, prefix = '', out: Record<string, number> = {}): Record<string, number> {
  if (typeof v === 'number' && Number.isFinite(v)) out[prefix] = v;
  else if (typeof v === 'boolean') out[prefix] = v ? 1 : 0;
  else if (v && typeof v === 'object' && !Array.isArray(v)) {
    for (const [k, x] of Object.entries(v)) numericLeaves(x, prefix ? `${prefix}/${k}` : k, out);
  }
  return out;
}

/** Leaves of a config as `a.b` params (values as strings, at most 6000 chars: MLflow's limit). */
export function configParams(v: unknown, prefix = '', out: MlflowKeyValue[] = []): MlflowKeyValue[] {
  if (v && typeof v === 'object' && !Array.isArray(v)) {
    for (const [k, x] of Object.entries(v)) configParams(x, prefix ? `${prefix}.${k}` : k, out);
  } else if (v !== undefined && prefix) {
    out.push({ key: mlflowKey(prefix), value: (typeof v === 'string' ? v : JSON.stringify(v)).slice(0, 6000) });
  }
  return out;
}
