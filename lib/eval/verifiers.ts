// The verifiers' pure parts (DESIGN §8, R2E-Gym): the execution-free judge's prompt (trajectory condensed,
// longest thoughts first) and its score P(YES)/(P(YES)+P(NO)) read from the answer token's log-probs
// wherever the answer appears; the reproduction-test prompt and the scripts it returns; regression counts.
import type { ChatApiMessage, TokenLogprob } from '../policy/chat.ts';

export interface Turn {
  action: string;
  observation: string;
}

/** Shortens `s` to about `keep` characters, keeping its head and tail. */
export function condense(s: string, keep: number): string {
  if (s.length <= keep) return s;
  const half = Math.max(0, Math.floor((keep - 40) / 2));
  return `${s.slice(0, half)}\n[... ${s.length - 2 * half} characters condensed ...]\n${s.slice(s.length - half)}`;
}

/** The thought of a turn (text before its `<function=` call) and the call. */
function splitThought(action: string): { thought: string; call: string } {
  const i = action.indexOf('<function=');
  return i < 0 ? { thought: action, call: '' } : { thought: action.slice(0, i), call: action.slice(i) };
}

/**
 * The trajectory as text within `maxChars`: the longest thought is halved until it fits or every thought is
 * short, then the longest observation, then the middle of the whole transcript.
 */
export function trajectoryText(turns: readonly Turn[], maxChars: number): string {
  const parts = turns.map((t) => ({ ...splitThought(t.action), observation: t.observation }));
  const render = () => parts.map((p, i) => `[step ${i + 1}: assistant]\n${p.thought}${p.call}\n[step ${i + 1}: observation]\n${p.observation}`).join('\n\n');
  const MIN = 200;
  let text = render();
  for (let guard = 0; text.length > maxChars && guard < 10_000; guard++) {
    const thoughts = parts
      .map((p, i) => [p.thought.length, i] as const)
      .filter(([n]) => n > MIN)
      .sort((a, b) => b[0] - a[0]);
    if (thoughts.length) {
      const i = thoughts[0]![1];
      parts[i]!.thought = condense(parts[i]!.thought, Math.max(MIN, Math.floor(parts[i]!.thought.length / 2)));
    } else {
      const obs = parts
        .map((p, i) => [p.observation.length, i] as const)
        .filter(([n]) => n > MIN)
        .sort((a, b) => b[0] - a[0]);
      if (!obs.length) break;
      const i = obs[0]![1];
      parts[i]!.observation = condense(parts[i]!.observation, Math.max(MIN, Math.floor(parts[i]!.observation.length / 2)));
    }
    text = render();
  }
  return text.length > maxChars ? condense(text, maxChars) : text;
}

export const JUDGE_SYSTEM = 'You are an expert software engineer who reviews patches. You judge whether a patch resolves a GitHub issue.';

/** The execution-free verifier's conversation: problem, trajectory (condensed to fit), final patch, YES/NO question. */
export function judgeMessages(input: { problem: string; turns: readonly Turn[]; patch: string; maxPromptChars: number }): ChatApiMessage[] {
  const question =
    'Does the final patch resolve the issue? Think it through briefly, then end your reply with exactly one of\n<judgement>YES</judgement>\n<judgement>NO</judgement>';
  const fixed = `<issue>\n${input.problem.trim()}\n</issue>\n\n<trajectory>\n\n</trajectory>\n\n<final_patch>\n${input.patch}\n</final_patch>\n\n${question}`;
  const room = Math.max(1000, input.maxPromptChars - fixed.length - JUDGE_SYSTEM.length);
  const patch = input.patch.length > room / 2 ? condense(input.patch, Math.floor(room / 2)) : input.patch;
  const traj = trajectoryText(input.turns, Math.max(500, room - patch.length));
  return [
    { role: 'system', content: JUDGE_SYSTEM },
    {
      role: 'user',
      content: `<issue>\n${input.problem.trim()}\n</issue>\n\n<trajectory>\n${traj}\n</trajectory>\n\n<final_patch>\n${patch || '(empty: no change)'}\n</final_patch>\n\n${question}`,
    },
  ];
}

const norm = (token: string) => token.replace(/[\s*_`'".:,!()[\]<>]/g, '').toUpperCase();
const isWord = (token: string, word: 'YES' | 'NO') => norm(token) === word;
/** the first token of a multi-token spelling of the word (`Y` of `Y|E|S`) also starts the answer */
const starts = (token: string, word: 'YES' | 'NO') => {
  const n = norm(token);
  return n.length > 0 && word.startsWith(n);
};

export interface Judgement {
  /** P(YES) / (P(YES) + P(NO)) at the answer token; 0.5 when no answer was found */
  score: number;
  /** index of the answer token in the completion, or -1 */
  position: number;
  pYes: number;
  pNo: number;
  how: 'marker' | 'sampled' | 'alternative' | 'prefix' | 'none';
}

/**
 * Finds the answer token and reads P(YES) and P(NO) from its top log-probs (every alternative whose text
 * starts the word counts: `YES`, ` Yes`, `Y`, ...). The answer token is the one right after the last
 * `<judgement>` marker; without a marker, the last sampled YES/NO word; else the last position whose
 * alternatives hold one; else the last position whose alternatives start one.
 */
export function judgementScore(logprobs: readonly TokenLogprob[]): Judgement {
  const none: Judgement = { score: 0.5, position: -1, pYes: 0, pNo: 0, how: 'none' };
  if (!logprobs.length) return none;
  const text = logprobs.map((l) => l.token);
  let position = -1;
  let how: Judgement['how'] = 'none';
  // marker: the token after the last `<judgement>` in the text
  const joined = text.join('');
  const marker = joined.lastIndexOf('<judgement>');
  if (marker >= 0) {
    // the first token holding a word character after the marker, also when it carries the marker's end (`>YES`)
    const end = marker + '<judgement>'.length;
    let at = 0;
    for (let i = 0; i < text.length; i++) {
      const next = at + text[i]!.length;
      if (next > end && norm(text[i]!.slice(Math.max(0, end - at))) !== '') {
        position = i;
        how = 'marker';
        break;
      }
      at = next;
    }
  }
  const lastWhere = (f: (l: TokenLogprob) => boolean) => {
    for (let i = logprobs.length - 1; i >= 0; i--) if (f(logprobs[i]!)) return i;
    return -1;
  };
  if (position < 0 && (position = lastWhere((l) => isWord(l.token, 'YES') || isWord(l.token, 'NO'))) >= 0) how = 'sampled';
  if (position < 0 && (position = lastWhere((l) => l.top.some((x) => isWord(x.token, 'YES') || isWord(x.token, 'NO')))) >= 0) how = 'alternative';
  if (position < 0 && (position = lastWhere((l) => [l, ...l.top].some((x) => starts(x.token, 'YES') || starts(x.token, 'NO')))) >= 0) how = 'prefix';
  if (position < 0) return none;
  const at = logprobs[position]!;
  // the sampled token with the alternatives, each distinct token once
  const seen = new Map<string, number>();
  for (const x of [{ token: at.token, logprob: at.logprob }, ...at.top]) if (!seen.has(x.token)) seen.set(x.token, x.logprob);
  let pYes = 0;
  let pNo = 0;
  for (const [tok, lp] of seen) {
    if (starts(tok, 'YES')) pYes += Math.exp(lp);
    else if (starts(tok, 'NO')) pNo += Math.exp(lp);
  }
  if (pYes + pNo === 0) return { ...none, position, how };
  return { score: pYes / (pYes + pNo), position, pYes, pNo, how };
}

/** What a reproduction test prints: the harness counts `ISSUE RESOLVED`. */
export const REPRO_RESOLVED = 'ISSUE RESOLVED';
export const REPRO_REPRODUCED = 'ISSUE REPRODUCED';

/** The test-generation prompt (R2E-Gym / Agentless style): one standalone script per answer. */
export function reproductionMessages(problem: string, repo: string): ChatApiMessage[] {
  return [
    { role: 'system', content: 'You are an expert Python developer who writes tests that reproduce bug reports.' },
    {
      role: 'user',
      content: `Here is an issue reported against the repository ${repo}, checked out at /testbed:\n\n<issue>\n${problem.trim()}\n</issue>\n\nWrite one standalone Python 3 script that reproduces the issue. It runs with \`python3\` from /testbed. It must print \`${REPRO_REPRODUCED}\` when the behaviour described in the issue is still present and \`${REPRO_RESOLVED}\` when the issue is fixed, and nothing else of that form. Give the script in one \`\`\`python code block.`,
    },
  ];
}

/** The script of a reproduction-test answer: the last ```python block (or the whole text when it has none). */
export function scriptFrom(answer: string): string | null {
  const blocks = [...answer.matchAll(/```(?:python|py)?[ \t]*\n([\s\S]*?)```/g)].map((m) => m[1]!);
  const s = (blocks.at(-1) ?? '').trim();
  return s ? `${s}\n` : null;
}

/** Whether a reproduction test's output says the issue is resolved (and not also reproduced). */
export function reportsResolved(output: string): boolean {
  return output.includes(REPRO_RESOLVED) && !output.includes(REPRO_REPRODUCED);
}
