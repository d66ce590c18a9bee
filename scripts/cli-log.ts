// What a `swerl` command prints when something goes wrong (docs/design.md §2): a warning on the way (a retried
// activity) is one line; a failed command ends with one line naming the workflow and the innermost cause, exits
// 1, and writes the whole failure chain (every cause, its stack, the warnings before it) to a log file that the
// line names.
import { appendFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { inspect } from 'node:util';
import { ActivityFailure, ApplicationFailure, ChildWorkflowFailure, TimeoutFailure, type LogLevel, type LogMetadata } from '@temporalio/common';
import { DefaultLogger, Runtime, type LogEntry } from '@temporalio/worker';
import { isGrpcServiceError, ServiceError, WorkflowFailedError } from '@temporalio/client';

/** A workflow the command started (or followed) ended in failure; `cause` is what the client reported. */
export class RunFailedError extends Error {
  constructor(
    readonly workflowId: string,
    cause: unknown,
  ) {
    super(`workflow ${workflowId} failed`, { cause });
    this.name = 'RunFailedError';
  }
}

const TRANSIENT_GRPC = new Set([4, 14]); // DEADLINE_EXCEEDED, UNAVAILABLE: a loaded or restarting server, not a failed run

/**
 * The result of the workflow a command follows. A long poll the server could not answer in time (a loaded host, a
 * restarting server) is polled again, saying so in one line; a failed workflow is a RunFailedError naming it.
 */
export async function followResult<R>(handle: { result(): Promise<unknown> }, workflowId: string): Promise<R> {
  for (let retries = 0; ; retries++) {
    try {
      return (await handle.result()) as R;
    } catch (e) {
      if (e instanceof WorkflowFailedError) throw new RunFailedError(workflowId, e);
      const grpc = e instanceof ServiceError && isGrpcServiceError(e.cause) ? e.cause.code : undefined;
      if (grpc === undefined || !TRANSIENT_GRPC.has(grpc) || retries >= 100) throw e;
      appendLog(`following ${workflowId}: ${inspect(e, { depth: 6 })}`);
      console.error(`[warn] following ${workflowId}: ${innermostCause(e)}; polling again`);
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}

/** One link of a failure chain, outermost first. */
export interface FailureLink {
  /** the error's class, or an ApplicationFailure's type (the activity's error class) */
  kind: string;
  message: string;
  /** where it happened, when the link says: `activity syncPolicy` or `workflow run-1-iter-0 (rlIteration)` */
  where?: string;
}

function linkOf(e: unknown): FailureLink {
  if (!(e instanceof Error)) return { kind: typeof e, message: String(e) };
  if (e instanceof ApplicationFailure) return { kind: e.type ?? 'ApplicationFailure', message: e.message };
  if (e instanceof ActivityFailure) return { kind: 'ActivityFailure', message: e.message, where: `activity ${e.activityType}` };
  if (e instanceof ChildWorkflowFailure) return { kind: 'ChildWorkflowFailure', message: e.message, where: `workflow ${e.execution.workflowId} (${e.workflowType})` };
  if (e instanceof TimeoutFailure) return { kind: `TimeoutFailure(${String(e.timeoutType)})`, message: e.message };
  if (e instanceof RunFailedError) return { kind: e.name, message: e.message, where: `workflow ${e.workflowId}` };
  return { kind: e.name, message: e.message };
}

/** The chain from `e` through its causes, outermost first (at most 20 links: a cycle cannot hang it). */
export function failureChain(e: unknown): FailureLink[] {
  const links: FailureLink[] = [];
  for (let x: unknown = e, d = 0; x !== undefined && x !== null && d < 20; d++) {
    links.push(linkOf(x));
    x = x instanceof Error ? x.cause : undefined;
  }
  return links;
}

/** Text on one line: a line break becomes `; ` (a space after a colon), runs of blanks one space: `a:\n  b\n c` reads `a: b; c`. */
export function oneLine(s: string): string {
  return s
    .trim()
    .replace(/\s*\n\s*/g, '; ')
    .replace(/\s+/g, ' ')
    .replace(/:;/g, ':')
    .trim();
}

/** The innermost cause as `Kind: message` (an activity's own error class is its kind), on one line. */
export function innermostCause(e: unknown): string {
  const chain = failureChain(e);
  const last = chain[chain.length - 1]!;
  const plain = ['Error', 'ApplicationFailure', 'object', 'string'].includes(last.kind);
  return oneLine(plain ? last.message : `${last.kind}: ${last.message}`);
}

/** The workflow ids and activity the chain passes through: `run-1 > run-1-iter-0 > activity syncPolicy`. */
function whereIn(chain: FailureLink[]): string {
  return chain
    .map((l) => l.where?.replace(/^workflow (\S+).*$/, '$1'))
    .filter((w): w is string => !!w)
    .join(' > ');
}

/** The last line of a failed command: `swerl CMD: WHERE failed: CAUSE (full failure chain: LOG)`. */
export function failureLine(command: string, e: unknown, logFile: string): string {
  const where = whereIn(failureChain(e));
  return `swerl ${command}: ${where ? `${where} failed: ` : ''}${innermostCause(e)} (full failure chain: ${logFile})`;
}

let commandLog: string | undefined;

/** Where this command's log goes: `<dir>/swerl.log` once the command knows its output directory. */
export function useLogDir(dir: string): string {
  commandLog = join(resolve(dir), 'swerl.log');
  return commandLog;
}

/** This command's log file (a file under the temp directory when it has no output directory yet). */
export function logFile(command = 'command'): string {
  commandLog ??= join(tmpdir(), `swerl-${command.replace(/[^A-Za-z0-9-]/g, '-')}-${new Date().toISOString().replace(/[:.]/g, '-')}-${process.pid}.log`);
  return commandLog;
}

/** Appends a block to the command's log; a log that cannot be written never hides the failure it reports. */
export function appendLog(text: string, command?: string): void {
  const file = logFile(command);
  try {
    mkdirSync(dirname(file), { recursive: true });
    appendFileSync(file, `${new Date().toISOString()} ${text}\n`);
  } catch {
    // the terminal line still says what failed
  }
}

/** Writes the whole chain to the log and prints the one line; the caller exits 1. */
export function reportFailure(command: string, e: unknown): string {
  const file = logFile(command);
  const links = failureChain(e)
    .map((l, i) => `  ${'  '.repeat(i)}${l.kind}${l.where ? ` [${l.where}]` : ''}: ${l.message}`)
    .join('\n');
  appendLog(`swerl ${command} failed\n${links}\n\n${inspect(e, { depth: 20, breakLength: 160 })}`, command);
  const line = failureLine(command, e, file);
  console.error(line);
  return line;
}

// in the log only: the rollout queue has no workflows by design, and a failed workflow is the command's last line
const QUIET = new Set(['No workflows registered, not polling for workflow tasks', 'Workflow failed']);

/** The SDK core's errors are Rust debug dumps (`Status { code: X, message: "Y", details: b"…" }`): their code and message. */
function coreError(s: string): string {
  const code = /code: (\w+)/.exec(s)?.[1];
  const message = /message: "([^"]*)"/.exec(s)?.[1];
  return message ? `${code ? `${code}: ` : ''}${message}` : oneLine(s).slice(0, 200);
}

/** A worker log entry as one line: `[warn] activity syncPolicy (workflow W) attempt 2 failed: Kind: message`. */
export function warningLine(entry: Pick<LogEntry, 'level' | 'message' | 'meta'>): string {
  const m: LogMetadata = entry.meta ?? {};
  const err = m.error instanceof Error ? `: ${innermostCause(m.error)}` : typeof m.error === 'string' ? `: ${coreError(m.error)}` : '';
  const level = `[${String(entry.level).toLowerCase()}]`;
  if (entry.message === 'Activity failed' && typeof m.activityType === 'string') {
    const wf = typeof m.workflowId === 'string' ? ` (workflow ${m.workflowId})` : '';
    return `${level} activity ${m.activityType}${wf} attempt ${String(m.attempt ?? '?')} failed${err}`;
  }
  const wf = typeof m.workflowId === 'string' ? ` (workflow ${m.workflowId})` : '';
  return `${level} ${oneLine(entry.message)}${wf}${err}`;
}

/**
 * The embedded worker's logger: each entry at `level` or above as one line on stderr, in full in the command's log.
 * Installed once per process (tests and host processes that installed a runtime keep theirs).
 */
export function installCliLogger(level: LogLevel = process.env.SWERL_LOG_LEVEL === 'INFO' ? 'INFO' : 'WARN'): void {
  const log = (entry: LogEntry) => {
    appendLog(`[${entry.level}] ${entry.message} ${inspect(entry.meta ?? {}, { depth: 8, breakLength: 160 })}`);
    if (!QUIET.has(entry.message)) console.error(warningLine(entry));
  };
  try {
    // the SDK core's own warnings (a busy workflow, a lost connection) through the same logger, not as raw dumps
    Runtime.install({ logger: new DefaultLogger(level, log), telemetryOptions: { logging: { filter: { core: level, other: level }, forward: {} } } });
  } catch {
    // a runtime exists already (tests, a host process): keep its logger
  }
}
