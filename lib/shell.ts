// Quoting for bash command lines the sandboxes run.

/** Quotes one word for bash: single quotes, each embedded quote closed, escaped and reopened. */
export function shq(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}
