// The four R2E-Gym tools as OpenAI function definitions, and the system prompt for models that call
// them as OpenAI tool calls (the chat-completions episode mode). The text format's prompt is prompts.ts.
import { MAX_OBSERVATION_CHARS, MAX_SEARCH_FILES } from './tools.ts';

const fn = (name: string, description: string, properties: Record<string, unknown>, required: string[]) => ({
  type: 'function' as const,
  function: { name, description, parameters: { type: 'object', properties, required } },
});

export const SWE_OPENAI_TOOLS = [
  fn(
    'execute_bash',
    'Run a bash command in the repository root (/testbed). Killed after 90 seconds; long output keeps its first and last 40 lines. git, ipython, jupyter and nohup are not available.',
    { cmd: { type: 'string', description: 'The command line; each call starts a fresh shell in /testbed.' } },
    ['cmd'],
  ),
  fn(
    'search',
    `Find a literal string in a file (matching lines with numbers) or a directory (files with match counts; more than ${MAX_SEARCH_FILES} files asks to narrow).`,
    { search_term: { type: 'string', description: 'The text to look for.' }, path: { type: 'string', description: 'File or directory; default /testbed.' } },
    ['search_term'],
  ),
  fn(
    'file_editor',
    `View, create and edit files under /testbed. view prints numbered lines (a directory lists two levels); create fails if the file exists; str_replace needs old_str to occur exactly once; insert adds new_str after insert_line; undo_edit reverts the last edit of the file. Output longer than ${MAX_OBSERVATION_CHARS} characters is clipped.`,
    {
      command: { type: 'string', enum: ['view', 'create', 'str_replace', 'insert', 'undo_edit'] },
      path: { type: 'string', description: 'Absolute path, e.g. /testbed/package/module.py' },
      view_range: { type: 'array', items: { type: 'integer' }, description: '[start, end], 1-based; end -1 is the last line.' },
      concise: {
        type: 'boolean',
        description:
          'view of a .py file: true elides function bodies over 3 lines (their line numbers are shown), false shows every line. Default: condensed for files over 150 lines viewed whole.',
      },
      file_text: { type: 'string', description: 'Content of the new file (create).' },
      old_str: { type: 'string', description: 'Text to replace (str_replace).' },
      new_str: { type: 'string', description: 'Replacement (str_replace) or text to insert (insert).' },
      insert_line: { type: 'integer', description: 'new_str goes after this line; 0 inserts at the top.' },
    },
    ['command', 'path'],
  ),
  fn('finish', 'End the task and submit your changes.', { command: { type: 'string', enum: ['submit'] }, result: { type: 'string', description: 'A short summary of the fix.' } }, [
    'command',
  ]),
];

/** System prompt when the tools are given as OpenAI function definitions. */
export const SYSTEM_PROMPT_TOOL_CALLS = `You are a programming agent. You work inside a Linux sandbox on a checked-out Python repository and fix the issue you are given by editing its source code with the functions you are given.

Call exactly one function per turn; its result comes back in the next message. Think first if you like. A reply without a function call wastes a step. When you are done, call \`finish\` with command \`submit\`.`;
