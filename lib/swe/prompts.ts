// Prompt texts of the SWE environment (R2E-Gym / DeepSWE style, our own words): the system prompt with the
// four tools and the `<function=...>` call format, the instance prompt, the no-call reminder, the budget warning.
import { MAX_OBSERVATION_CHARS, MAX_SEARCH_FILES } from './tools.ts';
import type { EditConfig, EditFormat } from './env-config.ts';

export const SYSTEM_PROMPT = `You are a programming agent. You work inside a Linux sandbox on a checked-out Python repository and fix the issue you are given by editing its source code with the tools below.

You call exactly one function per turn. Think first if you like, then write the call in this format:

<function=FUNCTION_NAME>
<parameter=PARAMETER_NAME>value</parameter>
<parameter=OTHER_PARAMETER>
a value
that spans several lines
</parameter>
</function>

Rules:
- Only the first function call of your reply is executed; its result comes back in the next message.
- Put every required parameter in the call. Values are written as plain text (no quoting or escaping).
- A reply without a function call wastes a step.
- When you are done, call \`finish\` with command \`submit\`.

Functions:

1. execute_bash — run a bash command in the repository root (/testbed).
   Parameters:
   - cmd (string, required): the command line. Each call starts a fresh shell in /testbed.
   Notes: the command is killed after 90 seconds. Long output keeps its first and last 40 lines.
   \`git\`, \`ipython\`, \`jupyter\` and \`nohup\` are not available; do not start interactive programs.

2. search — find a literal string in a file or directory.
   Parameters:
   - search_term (string, required): the text to look for.
   - path (string, optional, default /testbed): a file (matching lines are listed with their numbers) or a directory (files with their match counts; more than ${MAX_SEARCH_FILES} files asks you to narrow the search).

3. file_editor — view, create and edit files. Paths are absolute and lie under /testbed.
   Parameters:
   - command (string, required): one of \`view\`, \`create\`, \`str_replace\`, \`insert\`, \`undo_edit\`.
   - path (string, required): e.g. /testbed/package/module.py
   - view_range (array of two integers, optional, \`view\` of a file): [start, end] line numbers, 1-based; end -1 means the last line.
   - concise (boolean, optional, \`view\` of a .py file): true shows the condensed view (function bodies over 3 lines elided, with their line numbers), false the whole file. A .py file over 150 lines is shown condensed unless \`view_range\` or concise false is given.
   - file_text (string, required for \`create\`): the content of the new file; \`create\` fails if the file exists.
   - old_str (string, required for \`str_replace\`): text that must occur exactly once in the file, whitespace included.
   - new_str (string, \`str_replace\`: the replacement, empty to delete; \`insert\`: the text to insert).
   - insert_line (integer, required for \`insert\`): \`new_str\` is inserted after this line; 0 inserts at the top.
   Notes: \`view\` of a file prints numbered lines (like \`cat -n\`); \`view\` of a directory lists files two levels deep.
   \`undo_edit\` reverts the last edit of that file. Output longer than ${MAX_OBSERVATION_CHARS} characters is clipped.

4. finish — end the task and submit your changes.
   Parameters:
   - command (string, required): \`submit\`.
   - result (string, optional): a short summary of the fix.`;

export interface InstancePromptInput {
  problemStatement: string;
  repoDir?: string;
}

export function instancePrompt({ problemStatement, repoDir = '/testbed' }: InstancePromptInput): string {
  return `A Python code repository is checked out at ${repoDir}. Here is an issue reported against it:

<issue>
${problemStatement.trim()}
</issue>

Change the non-test source files in ${repoDir} so that the behaviour described in the issue is fixed.
The tests that cover the issue already exist or will be added separately: do not modify any test files.

Suggested way to work:
1. Explore the repository to find the code involved in the issue.
2. Write a small script ${repoDir}/reproduce_issue.py that shows the problem, and run it with \`python3\`.
3. Edit the source code to fix the problem.
4. Run the reproduction script again to confirm the fix, and think about edge cases.
5. Run the relevant existing unit tests to make sure nothing else broke.
6. Call \`finish\` with command \`submit\`.

Keep the change minimal and focused on the issue.`;
}

/** Observation for a reply that contains no function call (the step still counts). */
export const NO_CALL_REMINDER = `No function call was found in your reply. Every reply must contain exactly one function call in this format:

<function=FUNCTION_NAME>
<parameter=PARAMETER_NAME>value</parameter>
</function>

If you have finished, call:
<function=finish>
<parameter=command>submit</parameter>
</function>`;

/**
 * Observation for a reply without a call when the chat template renders the tools and the model writes its calls as
 * `<tool_call>` JSON in the text (toolFormat "openai" on a token-id server).
 */
export const TOOL_CALL_REMINDER = `No tool call was found in your reply. Every reply must call exactly one of the functions execute_bash, search, file_editor or finish, written as:

<tool_call>
{"name": "FUNCTION_NAME", "arguments": {"PARAMETER_NAME": "value"}}
</tool_call>

If you have finished, call:
<tool_call>
{"name": "finish", "arguments": {"command": "submit"}}
</tool_call>`;

/** Observation wrapper for a call that could not be parsed or validated. */
export function callErrorObservation(error: string): string {
  return `ERROR: ${error.replace(/^ERROR:\s*/, '')}\nFix the function call and try again.`;
}

/** Appended to observations when the response token budget is nearly spent. */
export function tokenBudgetWarning(tokensLeft: number): string {
  return `You have about ${tokensLeft} tokens left in this episode. Finish your current change now and call \`finish\` with command \`submit\`; unsubmitted work is lost.`;
}

/**
 * Observation for a reply without a tool call when the model calls tools through the OpenAI interface (the
 * tool-calling system prompt): text is never executed there, so a `<function=…>` block written as text is named.
 */
export function noToolCallReminder(content: string | null): string {
  const tag = /<function=[^>\n]{0,64}>?/.exec(content ?? '')?.[0];
  const stray = tag ? `\nYour reply has \`${tag}\` in its text: here functions are called as tool calls, not written as text.` : '';
  return `No tool call was found in your reply; text is not executed.${stray}
Every reply must call exactly one of the functions execute_bash, search, file_editor or finish as a tool call.
If you have finished, call \`finish\` with command \`submit\`.`;
}

// ---------------------------------------------------------------------------------------------
// Edit mode (single turn, SWE-RL's setting): the issue, the oracle files' context, and how to write the edits.

/** One worked example per edit format, on a file of our own (not the task's). */
const EDIT_EXAMPLES: Record<EditFormat, string> = {
  'swe-rl': '```python\n### shapes/area.py\n<<<<<<< SEARCH\ndef square(side):\n    return side * 2\n=======\ndef square(side):\n    return side * side\n>>>>>>> REPLACE\n```',
  search_replace: '```python\n### shapes/area.py\n<<<<<<< SEARCH\ndef square(side):\n    return side * 2\n=======\ndef square(side):\n    return side * side\n>>>>>>> REPLACE\n```',
  whole_function: '```python\n### shapes/area.py\ndef square(side):\n    return side * side\n```',
  numbered_lines: '```python\n### shapes/area.py\n@@ 12-13\ndef square(side):\n    return side * side\n```',
};

/** A block of each format for a file, its lines described rather than shown (edit.example "template"): nothing to copy. */
const EDIT_TEMPLATES: Record<EditFormat, (path: string) => string> = {
  'swe-rl': (path) =>
    `<think>\nwhere the fault is and how to change the code\n</think>\n<solution>\n\`\`\`python\n### ${path}\n<<<<<<< SEARCH\nthe lines of ${path} to change, copied exactly\n=======\nthe same lines with the fix\n>>>>>>> REPLACE\n\`\`\`\n</solution>`,
  search_replace: (path) =>
    `\`\`\`python\n### ${path}\n<<<<<<< SEARCH\nthe lines of ${path} to change, copied exactly\n=======\nthe same lines with the fix\n>>>>>>> REPLACE\n\`\`\``,
  whole_function: (path) => `\`\`\`python\n### ${path}\nthe whole function of ${path} that holds the fault, fixed\n\`\`\``,
  numbered_lines: (path) => `\`\`\`python\n### ${path}\n@@ FIRST-LAST\nthe new lines that replace lines FIRST to LAST\n\`\`\``,
};

/** How a block of each format starts, for a file: the cue that ends the prompt without an example (edit.example "none"). */
const BLOCK_START: Record<EditFormat, (path: string) => string> = {
  'swe-rl': (path) => `<think>\n...\n</think>\n<solution>\n\`\`\`python\n### ${path}\n<<<<<<< SEARCH`,
  search_replace: (path) => `\`\`\`python\n### ${path}\n<<<<<<< SEARCH`,
  whole_function: (path) => `\`\`\`python\n### ${path}`,
  numbered_lines: (path) => `\`\`\`python\n### ${path}\n@@ `,
};

const EDIT_RULES: Record<EditFormat, string> = {
  'swe-rl': `Inside <solution>, write each change as a SEARCH/REPLACE edit in its own fenced block: the line "### " and the file's path, the line "<<<<<<< SEARCH", lines copied exactly from the file (indentation included, line numbers left out) that occur once in it, the line "=======", the lines that take their place, and the line ">>>>>>> REPLACE".`,
  search_replace: `Write each change as a SEARCH/REPLACE edit in its own fenced block: the line "### " and the file's path, the line "<<<<<<< SEARCH", lines copied exactly from the file (indentation included, line numbers left out) that occur once in it, the line "=======", the lines that take their place, and the line ">>>>>>> REPLACE".`,
  whole_function: `Write each changed function (or class) whole, in its own fenced block: the line "### " and the file's path, then the complete new definition, starting with its "def" or "class" line, indented as in the file and without line numbers. It replaces the definition of the same name.`,
  numbered_lines: `Write each change in a fenced block: the line "### " and the file's path, then for each stretch of lines to replace the line "@@ FIRST-LAST" (the numbers shown beside the file) followed by the new lines, without line numbers. Lines FIRST to LAST are replaced by what follows; to delete them, write nothing after the "@@" line.`,
};

/** The system prompt of edit mode: SWE-RL's format asks for a thinking section first. */
export function editSystemPrompt(format: EditFormat): string {
  if (format === 'swe-rl') {
    return `You solve programming tasks. Reason first, then answer, in exactly this shape:
<think>
your reasoning: what the issue means, where the fault is, how to change the code
</think>
<solution>
the answer the task asks for
</solution>`;
  }
  return 'You fix issues in Python repositories by writing code edits in the format you are given.';
}

export interface EditPromptInput {
  problemStatement: string;
  /** the oracle files as lib/swe/edit-context.ts renders them */
  context: string;
  /** their paths, named again in the closing request */
  files?: readonly string[];
  format: EditFormat;
  /** "worked" (default): a worked example on a file of another project; "template": a block for the first file with its
   * lines described; "none": the rules, then the lines a block starts with */
  example?: EditConfig['example'];
  /** the context's lines carry their numbers (default true) */
  lineNumbers?: boolean;
}

/**
 * The issue, then how to write an edit with its worked example (on a file of another project), then the code, and last
 * the request naming the files shown: a small model continues what it read last, and with the example last it copied
 * the example (11-28: 21 of 48 replies of Qwen2.5-Coder-0.5B-Instruct named the example's file).
 */
export function editInstancePrompt({ problemStatement, context, files = [], format, example = 'worked', lineNumbers = true }: EditPromptInput): string {
  const where = files.length ? ` in ${files.join(', ')}` : '';
  const worked = example === 'worked' ? ` For example, a fix of shapes/area.py, a file of another project:\n\n${EDIT_EXAMPLES[format]}` : '';
  const closing =
    !files.length || example === 'worked'
      ? ''
      : example === 'template'
        ? `\n\nWrite it in this shape:\n\n${EDIT_TEMPLATES[format](files[0]!)}`
        : `\n\nStart your reply with these lines, then go on:\n${BLOCK_START[format](files[0]!)}`;
  return `Here is an issue reported against a Python repository:

<issue>
${problemStatement.trim()}
</issue>

${EDIT_RULES[format]}${worked}

Below are parts of the files involved${lineNumbers ? ', with the numbers of their lines at the left' : ''}; "..." stands for lines left out.

${context}

Find the cause of the issue in this code and fix it${where}. Change only what the fix needs. Do not edit test files.${closing}`;
}
