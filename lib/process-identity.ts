// Telling whether a process of this host still runs, and that it is the same process: a pid alone is not
// enough, since pids are reused (pid 1 in every restarted container). Its start time in clock ticks since
// boot and its PID namespace tell a reused pid from the original. Used by sandbox owner labels (a sweep
// removes the sandboxes of dead owners), worker identities (a restarted worker fails its dead
// predecessor's activities) and the store's temp directories. Linux /proc; elsewhere the checks fall back
// to the pid alone.
import { readFileSync, readlinkSync } from 'node:fs';

/** Start time of a process in clock ticks since boot (/proc/<pid>/stat field 22), or '' off Linux. */
export function processStartTicks(pid: number): string {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // the command name (field 2) may hold spaces and parentheses: fields after the last ')'
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? '';
  } catch {
    return '';
  }
}

/** `/proc/self/ns/pid` as a number, or '' off Linux. */
export function pidNamespace(): string {
  try {
    return /\[(\d+)\]/.exec(readlinkSync('/proc/self/ns/pid'))?.[1] ?? '';
  } catch {
    return '';
  }
}

/** Is process `pid` of this host still running, and (given `startTicks`) the one that started then? */
export function processAlive(pid: number, startTicks?: string): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  // the pid exists: the same process only if it started when the caller saw it start
  return !startTicks || processStartTicks(pid) === '' || processStartTicks(pid) === startTicks;
}
