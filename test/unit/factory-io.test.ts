// The factory's sources and its issue writer, against small local HTTP servers that speak PyPI's JSON API and
// OpenAI's chat API (the tests may not reach the network): a `pypi:` sdist is downloaded once, checked against
// the sha256 the index lists and cached (the next load needs no index), its top-level directory stripped; a
// mismatching sdist and a release without one are refused by name. Tarballs are deterministic. The issue
// writer's rewrite replaces the template unless it quotes a line of the fix or the server fails.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fetchSdist, loadSource, pythonFilesOf, readTarball, testFilesIn, writeTarball } from '../../activities/factory/source.ts';
import { rewriteStatement } from '../../activities/factory/issue-writer.ts';
import { filePatch } from '../../lib/factory/patch.ts';
import { defaultPackageDirs, setAsideClockTests, type Baseline } from '../../activities/factory/repo.ts';

let server: Server;
let base = '';
const hits: string[] = [];
let sdist: Buffer;
let listedSha = '';
let chatReply = '';
const cache = mkdtempSync(join(tmpdir(), 'swerl-sdist-cache-'));

before(async () => {
  sdist = await writeTarball([
    { path: 'shelf-1.0/shelf/__init__.py', data: Buffer.from('X = 1\n'), mode: 0o644 },
    { path: 'shelf-1.0/tests/test_x.py', data: Buffer.from('def test_x():\n    pass\n'), mode: 0o644 },
  ]);
  listedSha = createHash('sha256').update(sdist).digest('hex');
  server = createServer((req, res) => {
    hits.push(req.url!);
    const json = (o: unknown) => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify(o));
    };
    if (req.url === '/pypi/shelf/1.0/json')
      return json({ urls: [{ packagetype: 'sdist', url: `${base}/files/shelf-1.0.tar.gz`, filename: 'shelf-1.0.tar.gz', digests: { sha256: listedSha } }] });
    if (req.url === '/pypi/wheelonly/2.0/json') return json({ urls: [{ packagetype: 'bdist_wheel', url: `${base}/x.whl`, filename: 'x.whl', digests: { sha256: 'ab' } }] });
    if (req.url === '/files/shelf-1.0.tar.gz') return res.end(sdist);
    if (req.url === '/v1/models') return json({ object: 'list', data: [{ id: 'writer' }] });
    if (req.url === '/v1/chat/completions') {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        hits.push(body);
        json({ id: 'c', object: 'chat.completion', choices: [{ index: 0, finish_reason: 'stop', message: { role: 'assistant', content: chatReply } }] });
      });
      return;
    }
    res.statusCode = 404;
    res.end('{}');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  process.env.SWERL_PYPI_URL = base;
  process.env.SWERL_SDIST_CACHE = cache;
});
after(() => {
  server.close();
  rmSync(cache, { recursive: true, force: true });
});

test('a pypi: sdist is downloaded once, checked, cached and stripped of its top directory', async () => {
  const a = await fetchSdist('shelf', '1.0');
  assert.equal(a.sha256, listedSha);
  const n = hits.length;
  const b = await fetchSdist('shelf', '1.0');
  assert.equal(hits.length, n, 'the second load comes from the cache');
  assert.equal(b.sha256, a.sha256);
  const loaded = await loadSource('pypi:shelf==1.0', { kind: 'pypi', name: 'shelf', version: '1.0' });
  assert.deepEqual(
    loaded.entries.map((e) => e.path),
    ['shelf/__init__.py', 'tests/test_x.py'],
  );
  assert.equal(loaded.provenance.sha256, listedSha);
  assert.deepEqual(defaultPackageDirs(loaded.entries.map((e) => e.path)), ['shelf']);
  await assert.rejects(fetchSdist('wheelonly', '2.0'), /pypi:wheelonly==2\.0: the release has no source distribution \(only bdist_wheel\)/);
  await assert.rejects(fetchSdist('missing', '1.0'), /pypi:missing==1\.0: no such release/);
  listedSha = 'f'.repeat(64);
  rmSync(join(cache, 'shelf-1.0'), { recursive: true, force: true });
  await assert.rejects(fetchSdist('shelf', '1.0'), /shelf-1\.0\.tar\.gz has sha256 [0-9a-f]{64}, PyPI lists f{64}/);
  // tarballs: the same entries give the same bytes
  const t1 = await writeTarball([{ path: 'a.py', data: Buffer.from('x'), mode: 0o755 }]);
  assert.deepEqual(t1, await writeTarball([{ path: 'a.py', data: Buffer.from('x'), mode: 0o755 }]));
  assert.deepEqual(
    (await readTarball(t1)).map((e) => [e.path, e.mode & 0o111 ? 'x' : '-']),
    [['a.py', 'x']],
  );
  assert.deepEqual(defaultPackageDirs(['setup.py', 'src/pkg/a.py', 'tests/test_a.py', 'docs/conf.py', 'single.py', 'tool/x.py']), ['single.py', 'src/pkg', 'tool']);
});

test('the issue writer rewrites the template unless the rewrite quotes the fix or the server fails', async () => {
  const patch = filePatch('shelf/a.py', 'def f(x):\n    return x - 1\n', 'def f(x):\n    return x + 1\n');
  const template = 'Test failure in `test_f`\n\n- `tests/test_a.py::test_f`\n\nE   assert 0 == 2';
  chatReply = 'f() gives the wrong answer\n\nWhen I run the tests, tests/test_a.py::test_f fails with assert 0 == 2. It passed on the previous release.';
  const good = await rewriteStatement({ url: base }, template, patch, 1);
  assert.equal(good.by, 'issue writer writer');
  assert.equal(good.text, chatReply);
  assert.ok(hits.at(-1)!.includes('test_f') && !hits.at(-1)!.includes('return x'), 'the writer sees the template, never the fix');
  chatReply = 'The bug is in f:\n    return x - 1\nshould add one. Also test_f fails, please fix it soon.';
  const leaky = await rewriteStatement({ url: base }, template, patch, 1);
  assert.equal(leaky.by, 'issue writer writer', 'the leaking line is dropped, the rest kept');
  assert.doesNotMatch(leaky.text, /return x/);
  chatReply = 'return x - 1';
  assert.deepEqual(await rewriteStatement({ url: base, model: 'writer' }, template, patch, 1), { text: template, by: 'template (the rewrite by writer was unusable)' });
  const down = await rewriteStatement({ url: 'http://127.0.0.1:9/v1', model: 'm' }, template, patch, 1);
  assert.equal(down.text, template);
  assert.match(down.by, /^template \(the issue writer failed: /);
});

test("test files by the repository's pytest python_files (voluptuous keeps its tests in tests.py), pytest's default names otherwise", () => {
  const entry = (path: string, text: string) => ({ path, data: Buffer.from(text) });
  const paths = ['pkg/__init__.py', 'pkg/tests/tests.py', 'pkg/tests/helpers.py', 'tests/test_a.py', 'b_test.py', 'pkg/contest.py'];
  assert.deepEqual(testFilesIn(paths), ['tests/test_a.py', 'b_test.py']);
  const toml = entry('pyproject.toml', '[project]\nname = "x"\n\n[tool.pytest.ini_options]\npython_files = "tests.py"\ntestpaths = "pkg/tests"\n');
  assert.deepEqual(pythonFilesOf([toml]), ['tests.py']);
  assert.deepEqual(testFilesIn(paths, pythonFilesOf([toml])), ['pkg/tests/tests.py']);
  // a list, and globs; pytest.ini wins over the others; a section without python_files keeps the default
  assert.deepEqual(pythonFilesOf([entry('pytest.ini', '[pytest]\npython_files = check_*.py *_spec.py\n'), toml]), ['check_*.py', '*_spec.py']);
  assert.deepEqual(pythonFilesOf([entry('setup.cfg', '[tool:pytest]\npython_files = ["t_*.py", "tests.py"]\n')]), ['t_*.py', 'tests.py']);
  assert.deepEqual(pythonFilesOf([entry('tox.ini', '[pytest]\naddopts = -q\n[testenv]\npython_files = no.py\n')]), ['test_*.py', '*_test.py']);
  assert.deepEqual(pythonFilesOf([entry('setup.cfg', '[metadata]\nname = x\n')]), ['test_*.py', '*_test.py']);
});

test('the baseline sets aside tests that read a clock: never listed, named in clocked; the others stay', async () => {
  // our own timing tests, in the shapes a real suite writes them: a helper inside the test, a mixin, a parameter
  const timing = [
    'import time',
    'import timeit',
    'from shelf import render',
    '',
    'class LinearMixin:',
    '    def test_mixin_is_linear(self):',
    '        assert timeit.timeit(lambda: render("x" * 100), number=3) < 1',
    '',
    'class TestSpeed(LinearMixin):',
    '    def test_nested_is_linear(self):',
    '        def took(n):',
    '            start = time.perf_counter()',
    '            render("*" * n)',
    '            return time.perf_counter() - start',
    '        assert took(2000) < 10 * took(200) + 0.01',
    '',
    '    def test_renders(self):',
    '        assert render("a") == "<p>a</p>"',
    '',
    'def test_monotonic(n=1):',
    '    t = time.monotonic()',
    '    assert render("b")',
    '    assert time.monotonic() - t < 5',
    '',
    'def test_time_in_a_name_only():',
    '    runtime = 3',
    '    assert render("time") and runtime',
    '',
  ].join('\n');
  const sources = new Map([['tests/test_speed.py', timing]]);
  const passing = [
    'tests/test_speed.py::TestSpeed::test_nested_is_linear',
    'tests/test_speed.py::TestSpeed::test_mixin_is_linear',
    'tests/test_speed.py::TestSpeed::test_renders',
    'tests/test_speed.py::test_monotonic[1]',
    'tests/test_speed.py::test_time_in_a_name_only',
    'tests/test_other.py::test_elsewhere',
  ];
  const baseline: Omit<Baseline, 'fullSeconds'> = { passing, flaky: ['tests/test_other.py::test_flip'], other: {}, seconds: {}, functions: [], coverage: {}, testFiles: [] };
  const b = await setAsideClockTests(baseline, sources);
  const clocked = passing.slice(0, 2).concat(passing[3]!);
  assert.deepEqual(b.clocked, clocked);
  assert.deepEqual(b.passing, [passing[2], passing[4], passing[5]]);
  assert.deepEqual(b.flaky, ['tests/test_other.py::test_flip', ...clocked]);
  // nothing to set aside: the same baseline, with no clocked field
  const none = await setAsideClockTests({ ...baseline, passing: [passing[2]!] }, sources);
  assert.equal(none.clocked, undefined);
  assert.deepEqual(none.passing, [passing[2]]);
});
