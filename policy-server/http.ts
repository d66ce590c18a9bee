// HTTP plumbing of the policy server: errors in OpenAI's shape, JSON bodies with a size limit.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { z } from 'zod';

/** A request that fails with `status`; `param` names the offending field (OpenAI's error.param). */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly param: string | null = null,
  ) {
    super(message);
  }
}

/** A 400 naming the first invalid field and the value it got (or the unsupported parameters). */
export function badRequest(err: z.ZodError, body: unknown): HttpError {
  const issue = err.issues[0]!;
  if (issue.code === 'unrecognized_keys') {
    const where = issue.path.length ? `${issue.path.map(String).join('.')}.` : '';
    return new HttpError(400, `${issue.keys.map((k) => where + k).join(', ')}: not supported by this server (unknown or unimplemented parameter)`, where + issue.keys[0]);
  }
  const field = issue.path.map(String).join('.') || '(body)';
  let value: unknown = body;
  for (const k of issue.path) value = value !== null && typeof value === 'object' ? (value as Record<PropertyKey, unknown>)[k] : undefined;
  const shown = value === undefined ? 'missing' : JSON.stringify(value)?.slice(0, 100);
  return new HttpError(400, `${field}: ${issue.message} (got ${shown})`, field);
}

/** The request's body as JSON, at most `limit` bytes. */
export async function readJson(req: IncomingMessage, limit: number): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > limit) throw new HttpError(413, `body: larger than ${limit} bytes`, 'body');
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new HttpError(400, `body: not valid JSON (${(e as Error).message})`, 'body');
  }
}

export function send(res: ServerResponse, status: number, body: unknown): void {
  const data = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) });
  res.end(data);
}

/** A signal that aborts when the client closes the connection before its response is written: its generation stops. */
export function whileClientWaits(res: ServerResponse): AbortSignal {
  const ac = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) ac.abort(new HttpError(499, 'the client closed the connection'));
  });
  return ac.signal;
}

/** An error as OpenAI's error body (a response already under way is cut instead). */
export function sendError(res: ServerResponse, e: unknown): void {
  const err = e instanceof HttpError ? e : new HttpError(500, (e as Error)?.message ?? String(e));
  if (res.headersSent) {
    res.destroy();
    return;
  }
  send(res, err.status, { error: { message: err.message, type: err.status >= 500 ? 'internal_error' : 'invalid_request_error', param: err.param, code: err.status } });
}
