import { test } from 'node:test';
import assert from 'node:assert/strict';
import { extractToolCallBlocks, formatToolCall, parseOpenAIToolCalls, parseToolCall, type ParseResult, type ToolCall } from '../../lib/toolcall.ts';
import { SWE_TOOL_ALIASES, SWE_TOOL_SCHEMAS } from '../../lib/swe/tools.ts';
import { mulberry32 } from '../../lib/seed.ts';

const swe = { tools: SWE_TOOL_SCHEMAS, aliases: SWE_TOOL_ALIASES };

function ok(r: ParseResult): ToolCall {
  assert.ok(r.ok, r.ok ? '' : `${r.kind}: ${r.error}`);
  return r.call;
}

test('parses the first block with its parameters, layout newlines trimmed', () => {
  const text = `I will look at the file.
<function=file_editor>
<parameter=command>view</parameter>
<parameter=path>/testbed/a.py</parameter>
<parameter=view_range>[3, -1]</parameter>
</function>
<function=finish>
<parameter=command>submit</parameter>
</function>`;
  const c = ok(parseToolCall(text, swe));
  assert.deepEqual(c, { name: 'file_editor', args: { command: 'view', path: '/testbed/a.py', view_range: [3, -1] } });
  const raw = ok(parseToolCall(text));
  assert.equal(raw.args.view_range, '[3, -1]');
});

test('multi-line values keep inner whitespace and indentation', () => {
  const text =
    '<function=file_editor>\n<parameter=command>str_replace</parameter>\n<parameter=path>/testbed/x.py</parameter>\n<parameter=old_str>\n    return a\n</parameter>\n<parameter=new_str>\n    return b\n\n</parameter>\n</function>';
  const c = ok(parseToolCall(text, swe));
  assert.equal(c.args.old_str, '    return a');
  assert.equal(c.args.new_str, '    return b\n');
});

test('missing </function> at the end is tolerated when parameters are closed', () => {
  const c = ok(parseToolCall('<function=execute_bash>\n<parameter=cmd>ls -la</parameter>\n', swe));
  assert.deepEqual(c, { name: 'execute_bash', args: { cmd: 'ls -la' } });
  const r = parseToolCall('<function=execute_bash>\n<parameter=cmd>ls -la', swe);
  assert.ok(!r.ok && r.kind === 'malformed' && /cmd.*not closed/.test(r.error));
});

test('no call, unknown function, invalid arguments name the problem', () => {
  const none = parseToolCall('I think the bug is in foo().', swe);
  assert.ok(!none.ok && none.kind === 'none');
  const unk = parseToolCall('<function=rm_rf><parameter=x>1</parameter></function>', swe);
  assert.ok(!unk.ok && unk.kind === 'unknown_tool' && unk.error.includes('rm_rf') && unk.error.includes('execute_bash'));
  const bad = parseToolCall('<function=file_editor><parameter=command>delete</parameter><parameter=path>/testbed</parameter></function>', swe);
  assert.ok(!bad.ok && bad.kind === 'invalid_args' && bad.error.includes('`command`'), JSON.stringify(bad));
  const missing = parseToolCall('<function=search><parameter=path>/testbed</parameter></function>', swe);
  assert.ok(!missing.ok && missing.error.includes('`search_term`'));
  const line = parseToolCall(
    '<function=file_editor><parameter=command>insert</parameter><parameter=path>/testbed/a</parameter><parameter=insert_line>abc</parameter></function>',
    swe,
  );
  assert.ok(!line.ok && line.error.includes('`insert_line`'));
});

test('a malformed tag is named in the error, as the model wrote it', () => {
  const err = (t: string) => {
    const r = parseToolCall(t, { tools: SWE_TOOL_SCHEMAS });
    assert.equal(r.ok, false);
    return (r as { error: string }).error;
  };
  assert.match(err('<function=my tool>\n<parameter=cmd>ls</parameter>\n</function>'), /"<function=my tool>" is not `<function=NAME>`/);
  assert.match(err('<function=execute_bash><parameter=bad name>ls</parameter></function>'), /"<parameter=bad name>" is not `<parameter=NAME>`/);
  assert.match(err('<function=execute_bash>\n<parameter=cmd>ls</parameter>\n<parameter cmd>x</parameter>'), /the tag "<parameter cmd>" is not a well-formed/);
  assert.match(err('<function=execute_bash><parameter=cmd>ls</function>'), /parameter `cmd` is not closed/);
  assert.match(err('<function=execute_bash><parameter=command>ls</parameter></function>'), /`cmd`/);
});

test('aliases map to the tool names', () => {
  const c = ok(parseToolCall('<function=str_replace_editor><parameter=command>view</parameter><parameter=path>/testbed</parameter></function>', swe));
  assert.equal(c.name, 'file_editor');
  assert.equal(ok(parseToolCall('<function=submit></function>', swe)).name, 'finish');
});

test('<function= and </function> inside a parameter value are text', () => {
  const text =
    '<function=file_editor><parameter=command>create</parameter><parameter=path>/testbed/p.txt</parameter><parameter=file_text>x = "<function=finish></function>"</parameter></function>';
  const c = ok(parseToolCall(text, swe));
  assert.equal(c.args.file_text, 'x = "<function=finish></function>"');
});

test('huge parameters are refused with the limit named; duplicates refused', () => {
  const big = 'a'.repeat(300_000);
  const r = parseToolCall(`<function=execute_bash><parameter=cmd>${big}</parameter></function>`, swe);
  assert.ok(!r.ok && /too long/.test(r.error) && r.error.includes('cmd'));
  const d = parseToolCall('<function=execute_bash><parameter=cmd>a</parameter><parameter=cmd>b</parameter></function>', swe);
  assert.ok(!d.ok && d.error.includes('more than once'));
});

test('unicode survives', () => {
  const c = ok(parseToolCall('<function=execute_bash><parameter=cmd>echo "héllo ✓ 𝔘 日本"</parameter></function>', swe));
  assert.equal(c.args.cmd, 'echo "héllo ✓ 𝔘 日本"');
});

test('OpenAI tool calls parse into the same shape', () => {
  const c = ok(
    parseOpenAIToolCalls(
      [{ id: 'x', type: 'function', function: { name: 'file_editor', arguments: JSON.stringify({ command: 'view', path: '/testbed/a.py', view_range: [1, 5] }) } }],
      swe,
    ),
  );
  assert.deepEqual(c, { name: 'file_editor', args: { command: 'view', path: '/testbed/a.py', view_range: [1, 5] } });
  const bad = parseOpenAIToolCalls([{ function: { name: 'execute_bash', arguments: '{not json' } }], swe);
  assert.ok(!bad.ok && bad.kind === 'malformed' && /JSON/.test(bad.error));
  assert.ok(!parseOpenAIToolCalls([], swe).ok);
  assert.ok(!parseOpenAIToolCalls(null, swe).ok);
  assert.ok(!parseOpenAIToolCalls([{ function: { name: 'execute_bash', arguments: '[1]' } }], swe).ok);
});

test('formatToolCall round-trips', () => {
  const calls: ToolCall[] = [
    { name: 'execute_bash', args: { cmd: 'python3 -c "print(1)"' } },
    { name: 'file_editor', args: { command: 'str_replace', path: '/testbed/a.py', old_str: '\n  x = 1\n', new_str: '' } },
    { name: 'file_editor', args: { command: 'create', path: '/testbed/b.py', file_text: 'a\nb\n' } },
  ];
  for (const c of calls) assert.deepEqual(ok(parseToolCall(formatToolCall(c))), c);
  assert.deepEqual(ok(parseToolCall(formatToolCall({ name: 'file_editor', args: { command: 'view', path: '/testbed', view_range: [1, -1] } }), swe)).args.view_range, [1, -1]);
});

const rng = mulberry32;

const PIECES = [
  '<function=',
  '<function=execute_bash>',
  '<function=file_editor>',
  '<function=finish>',
  '</function>',
  '<parameter=',
  '<parameter=cmd>',
  '<parameter=command>',
  '<parameter=path>',
  '</parameter>',
  '>',
  '<',
  '=',
  'view',
  'ls',
  '/testbed/x',
  '\n',
  ' ',
  '"',
  "'",
  '日本',
  '𝔘',
  '\u0000',
  '\uFFFD',
  '\uD800',
  '<function=<function=>>',
  '<parameter=<parameter=x>>',
  'submit',
  '[1, -1]',
  '{}',
  '\\',
];

/** Random and adversarial model outputs (also used by the env fuzz test). */
export function fuzzTexts(n: number, seed = 1): string[] {
  const r = rng(seed);
  const out: string[] = [];
  for (let k = 0; k < n; k++) {
    const mode = k % 4;
    if (mode === 0) {
      // random code units, including lone surrogates
      const len = Math.floor(r() * 200);
      out.push(Array.from({ length: len }, () => String.fromCharCode(Math.floor(r() * 0x10000))).join(''));
    } else if (mode === 1) {
      const len = Math.floor(r() * 30);
      out.push(Array.from({ length: len }, () => PIECES[Math.floor(r() * PIECES.length)]).join(''));
    } else if (mode === 2) {
      // a valid call cut at a random point
      const full = formatToolCall({ name: 'file_editor', args: { command: 'view', path: '/testbed', view_range: '[1, 3]' } });
      out.push(full.slice(0, Math.floor(r() * full.length)));
    } else {
      // nested / repeated tags around a valid call
      const inner = PIECES[Math.floor(r() * PIECES.length)]!;
      out.push(`<function=execute_bash><parameter=cmd>${inner}echo hi${inner}</parameter>${inner}</function>`);
    }
  }
  return out;
}

test('fuzz: thousands of random and adversarial outputs never throw', () => {
  const texts = fuzzTexts(4000, 7);
  texts.push('<function='.repeat(10_000), '<parameter=x>'.repeat(5000), `<function=a>${'<parameter=p>'.repeat(2000)}`, 'x'.repeat(1_000_000));
  let parsed = 0;
  for (const t of texts) {
    const r = parseToolCall(t, swe);
    assert.equal(typeof r.ok, 'boolean');
    if (r.ok) parsed++;
    else assert.equal(typeof r.error, 'string');
    parseToolCall(t);
    parseOpenAIToolCalls([{ function: { name: 'execute_bash', arguments: t } }], swe);
  }
  for (const junk of [undefined, null, 42, {}, [], [{}], [{ function: null }], [{ function: { name: 5 } }]]) {
    assert.equal(parseToolCall(junk as unknown).ok, false);
    assert.equal(parseOpenAIToolCalls(junk).ok, false);
  }
  assert.ok(parsed > 0);
});

test('the Hermes/Qwen2.5 <tool_call> JSON format: the first call, arguments as an object or a JSON string', () => {
  const text =
    'Let me look.\n<tool_call>\n{"name": "file_editor", "arguments": {"command": "view", "path": "/testbed/a.py", "view_range": [3, -1]}}\n</tool_call>\n' +
    '<tool_call>\n{"name": "finish", "arguments": {"command": "submit"}}\n</tool_call>';
  assert.deepEqual(ok(parseToolCall(text, swe)), { name: 'file_editor', args: { command: 'view', path: '/testbed/a.py', view_range: [3, -1] } });
  const asString = '<tool_call>{"name": "execute_bash", "arguments": "{\\"cmd\\": \\"ls\\"}"}</tool_call>';
  assert.deepEqual(ok(parseToolCall(asString, swe)), { name: 'execute_bash', args: { cmd: 'ls' } });
  // a stop string may eat the closing tag; the JSON is whole
  assert.deepEqual(ok(parseToolCall('<tool_call>\n{"name": "finish", "arguments": {"command": "submit"}}\n', swe)), { name: 'finish', args: { command: 'submit' } });
  // whichever format comes first is the call
  const mixed = '<function=execute_bash><parameter=cmd>pwd</parameter></function>\n<tool_call>{"name": "finish", "arguments": {"command": "submit"}}</tool_call>';
  assert.equal(ok(parseToolCall(mixed, swe)).name, 'execute_bash');
  assert.equal(ok(parseToolCall(`<tool_call>{"name": "str_replace_editor", "arguments": {"command": "view", "path": "/testbed"}}</tool_call>`, swe)).name, 'file_editor');
});

test('a malformed <tool_call> names what is wrong; validation is the same as for the text format', () => {
  const cases: [string, RegExp][] = [
    ['<tool_call>{"name": "finish", "arguments": {"command": "submit"}</tool_call>', /not valid JSON/],
    ['<tool_call>["finish"]</tool_call>', /must be a JSON object/],
    ['<tool_call>{"arguments": {}}</tool_call>', /no "name"/],
    ['<tool_call>{"name": "finish", "arguments": "submit"}</tool_call>', /string that is not JSON/],
    ['<tool_call>{"name": "finish", "arguments": [1]}</tool_call>', /must be a JSON object/],
    ['<tool_call>{"name": "finish", "arguments": {"command": "submit"', /no closing `<\/tool_call>`/],
  ];
  for (const [text, re] of cases) {
    const r = parseToolCall(text, swe);
    assert.ok(!r.ok && r.kind === 'malformed' && re.test(r.error), `${text}: ${JSON.stringify(r)}`);
  }
  const unk = parseToolCall('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', swe);
  assert.ok(!unk.ok && unk.kind === 'unknown_tool');
  const bad = parseToolCall('<tool_call>{"name": "file_editor", "arguments": {"command": "delete", "path": "/testbed"}}</tool_call>', swe);
  assert.ok(!bad.ok && bad.kind === 'invalid_args' && bad.error.includes('`command`'));
  const none = parseToolCall('I would call <tool_call but I will not.', swe);
  assert.ok(!none.ok && none.kind === 'none');
});

test('extractToolCallBlocks: every well-formed block as an OpenAI tool call, the rest left in the content', () => {
  let n = 0;
  const idOf = () => `id${++n}`;
  const p = extractToolCallBlocks('Plan.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n<tool_call>{"name": "b"}</tool_call>', idOf);
  assert.deepEqual(p, {
    content: 'Plan.',
    toolCalls: [
      { id: 'id1', type: 'function', function: { name: 'a', arguments: '{"x":1}' } },
      { id: 'id2', type: 'function', function: { name: 'b', arguments: '{}' } },
    ],
  });
  assert.deepEqual(extractToolCallBlocks('<tool_call>{"name": "a"}</tool_call>', idOf).content, null);
  const broken = '<tool_call>{not json}</tool_call>';
  assert.deepEqual(extractToolCallBlocks(broken, idOf), { content: broken, toolCalls: [] });
});

test('a {"name", "arguments"} object of a known tool, fenced or the whole reply, is a call; broken JSON naming one is malformed; other JSON, and any without the tools, is none', () => {
  const fenced = (json: string, lang = 'json') => `I will submit now.\n\n\`\`\`${lang}\n${json}\n\`\`\`\n`;
  const finish = parseToolCall(fenced('{\n  "name": "finish",\n  "arguments": {"command": "submit"}\n}'), swe);
  assert.deepEqual(finish, { ok: true, call: { name: 'finish', args: { command: 'submit' } } });
  // an alias, arguments as a JSON string, a fence without a language
  const bash = parseToolCall(fenced('{"name": "bash", "arguments": "{\\"cmd\\": \\"ls /testbed\\"}"}', ''), swe);
  assert.deepEqual(bash, { ok: true, call: { name: 'execute_bash', args: { cmd: 'ls /testbed' } } });
  // validated as any call: a known tool with bad arguments is the tool's error
  const bad = parseToolCall(fenced('{"name": "file_editor", "arguments": {"command": "explode", "path": "/testbed"}}'), swe);
  assert.equal(bad.ok === false && bad.kind, 'invalid_args');
  // the first fenced object that names a tool counts, after code or data that does not
  const two = parseToolCall(
    `${fenced('{"name": "reproduce_issue", "arguments": {}}')}${fenced('print(1)', 'python')}${fenced('{"name": "search", "arguments": {"search_term": "foo"}}')}`,
    swe,
  );
  assert.deepEqual(two, { ok: true, call: { name: 'search', args: { search_term: 'foo' } } });
  for (const none of [
    fenced('{"name": "reproduce_issue", "arguments": {}}'),
    fenced('{"key": "value"}'),
    'Here is the data: {"name": "finish", "arguments": {"command": "submit"}} as the tool returns it.',
  ]) {
    const r = parseToolCall(none, swe);
    assert.equal(r.ok === false && r.kind, 'none', none);
  }
  assert.equal(parseToolCall(fenced('{"name": "finish", "arguments": {"command": "submit"}}')).ok, false, 'without the tools nothing names a tool');
  const cut = parseToolCall(fenced('{"name": "finish", "arguments": {'), swe);
  assert.equal(cut.ok === false && cut.kind, 'malformed', 'a cut object naming a tool is a malformed call');
  // the whole reply as one object (Python's True in it is not JSON: a malformed call naming the tool, not "no call")
  assert.deepEqual(parseToolCall(' {"name": "search", "arguments": {"search_term": "not_null"}}\n', swe), {
    ok: true,
    call: { name: 'search', args: { search_term: 'not_null' } },
  });
  const py = parseToolCall('{"name": "file_editor", "arguments": {"command": "view", "path": "/testbed", "concise": True}}', swe);
  assert.equal(py.ok === false && py.kind, 'malformed');
  assert.match(py.ok ? '' : py.error, /^Malformed tool call: the object naming `file_editor` is not a valid call: it is not valid JSON \(/);
  const quotes = parseToolCall(fenced('{"name": "execute_bash", "arguments": {"cmd": "echo "x""}}'), swe);
  assert.match(quotes.ok ? '' : quotes.error, /naming `execute_bash` is not a valid call/);
  // a tag still comes first: the text format's call wins over a fenced object before it
  const tagged = parseToolCall(`${fenced('{"name": "finish", "arguments": {"command": "submit"}}')}<function=search><parameter=search_term>x</parameter></function>`, swe);
  assert.deepEqual(tagged, { ok: true, call: { name: 'search', args: { search_term: 'x' } } });
});
