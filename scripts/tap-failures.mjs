// Prints each failed test of the given TAP files (node --test's tap reporter) with the first lines of its error,
// so the end of a long run's output says why it failed (CI keeps only the output's last part).
// Suites that failed only because a subtest did are left out; a hook's failure is kept.
//   node scripts/tap-failures.mjs LOG_DIR/*.tap
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';

const MAX_LINES = 8;
const MAX_CHARS = 600;

/** the failed tests of one TAP text: name, failure type and error lines */
export function tapFailures(text) {
  const lines = text.split('\n');
  const out = [];
  for (let i = 0; i < lines.length; i++) {
    const m = /^(\s*)not ok \d+ - (.*)$/.exec(lines[i]);
    if (!m) continue;
    const indent = m[1].length + 2;
    const block = [];
    for (let j = i + 2; j < lines.length && !/^\s*\.\.\.$/.test(lines[j]); j++) block.push(lines[j]);
    const field = (k) => block.findIndex((l) => l.startsWith(' '.repeat(indent) + k + ':'));
    const typeAt = field('failureType');
    const type = typeAt >= 0 ? block[typeAt].split(':').slice(1).join(':').trim().replace(/^'|'$/g, '') : '';
    if (type === 'subtestsFailed') continue;
    const errAt = field('error');
    let error = [];
    if (errAt >= 0) {
      const first = block[errAt].slice(indent + 'error:'.length).trim();
      if (first === '|-' || first === '|' || first === '>-') {
        for (let j = errAt + 1; j < block.length && (block[j].startsWith(' '.repeat(indent + 2)) || block[j].trim() === ''); j++) error.push(block[j].slice(indent + 2));
      } else error.push(first.replace(/^'|'$/g, '').replace(/''/g, "'"));
    }
    error = error.filter((l) => l.trim() !== '');
    out.push({ name: m[2], type, error });
  }
  return out;
}

function clip(lines) {
  const kept = lines.slice(0, MAX_LINES);
  let s = kept.join('\n');
  if (s.length > MAX_CHARS) s = s.slice(0, MAX_CHARS) + ' …';
  if (lines.length > kept.length) s += `\n… (${lines.length - kept.length} more line(s))`;
  return s;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const all = process.argv.slice(2).flatMap((f) => {
    let text;
    try {
      text = readFileSync(f, 'utf8');
    } catch {
      return [];
    }
    return tapFailures(text).map((x) => ({
      ...x,
      file: basename(f)
        .replace(/\.tap$/, '')
        .replace(/^[a-z-]+\.(?=.)/, ''),
    }));
  });
  if (all.length) {
    console.log(`[test] failed, with the first lines of each error:`);
    for (const f of all) {
      console.log(`  ✖ ${f.file}: ${f.name}${f.type ? ` (${f.type})` : ''}`);
      if (f.error.length) console.log(clip(f.error).replace(/^/gm, '      '));
    }
  }
}
