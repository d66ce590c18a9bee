# The grader's results channel and test-integrity checks (activities/grade.ts, DESIGN section 3 "Test
# integrity"). Copied into the grading container outside /testbed under a per-run random module name and
# put on sys.path by a .pth file. For pytest it is loaded with `-p` before any conftest, entry-point plugin
# or test module; for unittest and Django's runner (unittest's TestCase machinery) the .pth file imports it
# at interpreter start-up, and it acts in the test process only (recognised by its command line). Either
# way it runs before the code under test. At load it reads its configuration, removes every file of the
# grader (itself, its configuration, the .pth files, its directory) and takes its references: the listed
# test files and the test-support modules they import, compiled fresh (through pytest's assertion rewrite
# where pytest would), and snapshots of the classes and functions that run tests and make reports (code
# objects, class dicts, descriptors, defaults, closures). During the run:
#   - before each test of a checked file is called: the function called, and every test function held by
#     the trustworthy wrappers it calls through, must be compiled from its file (bytecode, constants,
#     names, lines against the fresh compile); code from anywhere else must come from a file that existed
#     unchanged before the run (under /testbed: one the patch did not change, as the base commit has it);
#     the test's own function (by name) must be among them; skip/xfail attributes only where the source
#     decorates; unittest's checks not overridden by untrustworthy code; no trace or profile function but
#     those set before any repository code; the snapshotted core of the runner unchanged;
#   - the call goes through a wrapper (pytest: in place of item.obj; unittest: TestCase._callTestMethod)
#     that records whether the test's own call returned or raised, and what;
#   - pytest's reports as it made them, and at the end the snapshot compared again.
# Records go, one JSON object a line, to a file descriptor the shell opened on a file it then unlinked.
# Python 3.5+ and pytest 4+: no f-strings, no annotations. The grader substitutes CONFIG_PATH.
import hashlib
import json
import os
import sys
import time
import types

CONFIG_PATH = "__SWERL_CONFIG_PATH__"

# ---------------------------------------------------------------------------------------------------
# configuration, then the grader's files gone before anything else runs

with open(CONFIG_PATH) as _f:
    _cfg = json.load(_f)
_RUNNER = _cfg.get("runner", "pytest")


def _remove_grader_files():
    import shutil

    for p in [CONFIG_PATH] + list(_cfg.get("remove", [])):
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                os.unlink(p)
        except OSError:
            pass
    workdir = _cfg.get("workdir")
    if workdir:
        shutil.rmtree(workdir, ignore_errors=True)
        sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != os.path.realpath(workdir)]
    # the options the grader added (-p this module, canary ids) are not left for the code under test
    # (or a nested pytest) to read
    ours = _cfg.get("addopts", "")
    val = os.environ.get("PYTEST_ADDOPTS")
    if ours and val is not None and val.endswith(ours):
        val = val[: len(val) - len(ours)].rstrip()
        if val:
            os.environ["PYTEST_ADDOPTS"] = val
        else:
            del os.environ["PYTEST_ADDOPTS"]


_remove_grader_files()

_PYTEST = _RUNNER == "pytest"
if _PYTEST:
    import pytest
try:
    import fcntl as _fcntl

    # a high, close-on-exec copy of the descriptor; the inherited one is closed
    _FD = _fcntl.fcntl(int(_cfg["fd"]), _fcntl.F_DUPFD_CLOEXEC, 200)
    os.close(int(_cfg["fd"]))
except Exception:
    _FD = int(_cfg["fd"])
_TESTBED = os.path.realpath(_cfg.get("testbed", "/testbed")) + os.sep
_TOUCHED = set(_cfg.get("touched", []))
_BLOBS = dict(_cfg.get("blobs", {}))
_T0 = time.time()
_CHECKS = bool(_cfg.get("checks", True))

# references taken before any repository code ran
_os_write = os.write
_json_dumps = json.dumps
_compile = compile
_isinstance = isinstance
_getattr = getattr
_type = type
_id = id
_len = len
_realpath = os.path.realpath
_stat = os.stat
_isfile = os.path.isfile
_sha1 = hashlib.sha1
_gettrace = sys.gettrace
_getprofile = sys.getprofile
_CodeType = types.CodeType
_FunctionType = types.FunctionType
_MethodType = types.MethodType
_BaseException = BaseException
try:
    import functools as _functools

    _wraps = _functools.wraps
    _partial = _functools.partial
except Exception:  # pragma: no cover
    _wraps = None
    _partial = None
try:
    import ast as _ast

    _ast_parse = _ast.parse
    _ast_walk = _ast.walk
    _FunctionDef = (_ast.FunctionDef, _ast.AsyncFunctionDef)
    _ClassDef = _ast.ClassDef
except Exception:  # pragma: no cover
    _ast = None
import unittest as _unittest  # loaded now so that its classes are snapshotted before the code under test runs

_SkipTest = _unittest.SkipTest
_Skipped = _XFailed = _Exit = _rewrite_asserts = None
if _PYTEST:
    from _pytest import outcomes as _outcomes

    _Skipped = _outcomes.Skipped
    _XFailed = _getattr(_outcomes, "XFailed", None)
    _Exit = _getattr(_outcomes, "Exit", None)
    try:
        from _pytest.assertion.rewrite import rewrite_asserts as _rewrite_asserts
    except Exception:  # pragma: no cover
        _rewrite_asserts = None
try:
    import inspect as _inspect

    _iscoroutinefunction = _inspect.iscoroutinefunction
except Exception:  # pragma: no cover
    _iscoroutinefunction = None


def _write(rec):
    _os_write(_FD, (_json_dumps(rec, sort_keys=True) + "\n").encode("utf-8"))


# ---------------------------------------------------------------------------------------------------
# fresh compiles: the code each checked file defines, by (name, first line)

_CODE_FIELDS = [
    f
    for f in (
        "co_argcount",
        "co_posonlyargcount",
        "co_kwonlyargcount",
        "co_nlocals",
        "co_flags",
        "co_code",
        "co_names",
        "co_varnames",
        "co_freevars",
        "co_cellvars",
        "co_name",
        "co_qualname",
        "co_firstlineno",
        "co_exceptiontable",
    )
    if hasattr(_compile("0", "<probe>", "eval"), f)
]
_CODE_FIELDS.append("co_linetable" if hasattr(_compile("0", "<probe>", "eval"), "co_linetable") else "co_lnotab")


def _same_code(a, b):
    """Two code objects compiled from the same source: bytecode, constants (nested code too), names, lines."""
    if a is b:
        return True
    for f in _CODE_FIELDS:
        if _getattr(a, f) != _getattr(b, f):
            return False
    ca = a.co_consts
    cb = b.co_consts
    if _len(ca) != _len(cb):
        return False
    for x, y in zip(ca, cb):
        if _isinstance(x, _CodeType):
            if not _isinstance(y, _CodeType) or not _same_code(x, y):
                return False
        elif _type(x) is not _type(y) or not (x == y or repr(x) == repr(y)):
            return False
    return True


def _index_code(code, index):
    index.setdefault((code.co_name, code.co_firstlineno), []).append(code)
    for c in code.co_consts:
        if _isinstance(c, _CodeType):
            _index_code(c, index)


def _rewritten_by_pytest(path):
    """Whether pytest's assertion rewrite will compile this file: test files by pytest's default
    python_files patterns (and conftest). Others are compiled plain first; the other variant is tried
    on a mismatch (pytest also rewrites files named on the command line and registered modules)."""
    base = os.path.basename(path)
    return base == "conftest.py" or (base.startswith("test_") and base.endswith(".py")) or base.endswith("_test.py")


class _Source(object):
    """One file compiled fresh from its bytes as read before any repository code ran: its code objects by
    (name, first line), its definition names, the ones it decorates."""

    def __init__(self, path, data, rewrite_first):
        self.path = path
        self.data = data
        self.index = {}
        self.decorated = set()
        self.names = set()
        self.variants = set()
        self.ok = False
        self.tree_error = False
        self.rewritten = None
        tree = None
        if _ast is not None:
            try:
                tree = _ast_parse(data, filename=path)
                self._names(tree)
            except Exception:
                self.tree_error = True
        # the variant pytest will use first (the rewritten one reuses the parsed tree); the other on a mismatch
        if rewrite_first and tree is not None and _rewrite_asserts is not None and self._add_rewritten(tree):
            self.ok = True
        elif self._add_plain():
            self.ok = True

    def _names(self, tree):
        assigned = set()
        for node in _ast_walk(tree):
            if _isinstance(node, _FunctionDef) or _isinstance(node, _ClassDef):
                self.names.add(node.name)
                if node.decorator_list:
                    self.decorated.add(node.name)
            elif _isinstance(node, _ast.Assign):
                for t in node.targets:
                    if _isinstance(t, _ast.Name):
                        assigned.add(t.id)
        # `test_x = pytest.mark.slow(test_x)`: marked by assignment, as good as decorated
        self.decorated.update(self.names & assigned)

    def _add_plain(self):
        self.variants.add("plain")
        try:
            _index_code(_compile(self.data, self.path, "exec", dont_inherit=True), self.index)
            return True
        except Exception:
            return False

    def _add_rewritten(self, tree=None):
        self.variants.add("rewritten")
        try:
            if tree is None:
                tree = _ast_parse(self.data, filename=self.path)
            _call_rewrite(tree, self.data, self.path)
            code = _compile(tree, self.path, "exec", dont_inherit=True)
            _index_code(code, self.index)
            self.rewritten = code
            return True
        except Exception:
            return False

    def _find(self, code):
        for c in self.index.get((code.co_name, code.co_firstlineno), ()):
            if _same_code(c, code):
                return True
        return False

    def matches(self, code):
        if self._find(code):
            return True
        # the other way of compiling the same bytes, once
        if "plain" not in self.variants:
            self._add_plain()
        elif "rewritten" not in self.variants and _rewrite_asserts is not None:
            self._add_rewritten()
        else:
            return False
        return self._find(code)


def _early_config():
    # the Config that is importing us (for the assertion rewrite's ini settings), if it is on the stack
    if not _PYTEST:
        return None
    try:
        from _pytest.config import Config

        f = sys._getframe(1)
        while f is not None:
            s = f.f_locals.get("self")
            if _isinstance(s, Config):
                return s
            f = f.f_back
    except Exception:
        pass
    return None


_rw_config = _early_config()


def _call_rewrite(tree, data, path):
    try:
        _rewrite_asserts(tree, data, path, _rw_config)
    except TypeError:  # pytest < 5: rewrite_asserts(mod, module_path, config)
        _rewrite_asserts(tree, path, _rw_config)


_SOURCES = {}
_cpu = time.process_time
_COST = {"precompile": 0.0, "snapshot": 0.0, "calls": 0.0, "finish": 0.0}
_t = _cpu()
for _p in _cfg.get("files", []) if _CHECKS else []:
    try:
        with open(_p, "rb") as _f:
            _SOURCES[_realpath(_p)] = _Source(_p, _f.read(), _PYTEST and _rewritten_by_pytest(_p))
    except (IOError, OSError):
        pass


class _Trace(object):
    def __call__(self, *a):
        pass


class _State(object):
    trace = _Trace()


def _prime_pytest_cache(path, src):
    """Hand pytest the module code compiled here: what its assertion rewrite would compile from the same
    bytes, path and configuration, so it loads it from its pyc cache instead of rewriting the file again.
    (Written with pytest's own cache functions; pytest checks the source's mtime and size, so a file
    changed afterwards is rewritten by pytest as usual, and then compared with this compile.)"""
    if src.rewritten is None or _rw_config is None:
        return False
    try:
        from pathlib import Path
        from _pytest.assertion import rewrite as _rw

        fn = Path(path)
        cache_dir = _rw.get_cache_dir(fn)
        if not _rw.try_makedirs(cache_dir):
            return False
        return bool(_rw._write_pyc(_State(), src.rewritten, _stat(path), cache_dir / (fn.name[:-3] + _rw.PYC_TAIL)))
    except Exception:
        return False


_PRIMED = 0
if _PYTEST:
    for _p in _cfg.get("testFiles", []) if _CHECKS else []:
        _s = _SOURCES.get(_realpath(_p))
        if _s is not None and _prime_pytest_cache(_p, _s):
            _PRIMED += 1
_COST["precompile"] = _cpu() - _t
_LAZY = {}


def _lazy_source(rp):
    """A file that is not a checked test file, compiled when code from it is first met (None: not trustworthy)."""
    if rp in _LAZY:
        return _LAZY[rp]
    src = None
    try:
        st = _stat(rp)
        with open(rp, "rb") as f:
            data = f.read()
        if rp.startswith(_TESTBED):
            rel = rp[_len(_TESTBED):]
            blob = _sha1(b"blob " + str(_len(data)).encode() + b"\0" + data).hexdigest()
            # a repository file the patch did not change, as the base commit has it
            if rel not in _TOUCHED and _BLOBS.get(rel) == blob:
                src = _Source(rp, data, _PYTEST and _rewritten_by_pytest(rp))
        elif st.st_ctime < _T0:
            # outside /testbed: a file that was there, unchanged, before the run began
            src = _Source(rp, data, False)
    except Exception:
        src = None
    _LAZY[rp] = src
    return src


_REALPATHS = {}


def _rp(filename):
    r = _REALPATHS.get(filename)
    if r is None:
        r = _REALPATHS[filename] = _realpath(filename)
    return r


_VERIFIED = {}


def _code_verdict(code):
    """None when `code` is compiled from a trustworthy file as it stands; else why not."""
    k = _id(code)
    hit = _VERIFIED.get(k)
    if hit is not None and hit[0] is code:
        return hit[1]
    fn = code.co_filename
    where = "%s (%s:%d)" % (code.co_name, fn, code.co_firstlineno)
    if not fn or fn.startswith("<"):
        why = "%s: not compiled from a file" % where
    else:
        rp = _rp(fn)
        src = _SOURCES.get(rp) or _lazy_source(rp)
        if src is None:
            why = "%s: from a file the patch changed" % where if rp.startswith(_TESTBED) else "%s: from a file created or changed during the run" % where
        elif not src.matches(code):
            why = "%s: differs from the file's own compile" % where
        else:
            why = None
    _VERIFIED[k] = (code, why)
    return why


def _func_of(obj):
    """The Python function behind a callable (bound method, partial, callable object), or None."""
    for _ in range(8):
        if _isinstance(obj, _FunctionType):
            return obj
        if _isinstance(obj, _MethodType):
            obj = obj.__func__
            continue
        if _partial is not None and _isinstance(obj, _partial):
            obj = obj.func
            continue
        if _isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
            continue
        call = _getattr(_type(obj), "__call__", None)
        if _isinstance(call, _FunctionType):
            return call
        return None
    return None


def _walk(called):
    """(function, verdict) for the function called and every function held in the closures of trusted
    ones, transitively: what trusted code can call. An untrusted function is not looked into (a
    __wrapped__ attribute or closure of code we cannot trust says nothing about what runs)."""
    out = []
    seen = set()
    todo = [called]
    while todo and _len(out) < 64:
        f = _func_of(todo.pop(0))
        if f is None or _id(f) in seen:
            continue
        seen.add(_id(f))
        why = _code_verdict(f.__code__)
        out.append((f, why))
        if why:
            continue
        for cell in f.__closure__ or ():
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            if _isinstance(v, (_FunctionType, _MethodType)) or (_partial is not None and _isinstance(v, _partial)):
                todo.append(v)
    return out


_MARK_ATTRS = ("pytestmark", "__unittest_skip__", "__unittest_expecting_failure__")


def _mark_attrs(f):
    """Skip/xfail attributes on a checked file's function that its source does not decorate."""
    code = f.__code__
    src = _SOURCES.get(_rp(code.co_filename)) if code.co_filename else None
    if src is None or code.co_name not in src.names or code.co_name in src.decorated:
        return []
    d = _getattr(f, "__dict__", None) or {}
    return ["%s (%s:%d): has %s but the source does not decorate it" % (code.co_name, code.co_filename, code.co_firstlineno, a) for a in _MARK_ATTRS if a in d]


_TESTCASE = _unittest.TestCase
# unittest's checks and what decides whether they fail: below unittest.TestCase overridden only by trustworthy code
_CASE_CHECKS = set(
    k for k in _TESTCASE.__dict__ if k.startswith("assert") or k.startswith("fail")
) | set(["failureException", "_getAssertEqualityFunc", "_baseAssertEqual", "addTypeEqualityFunc"])


def _case_overrides(inst):
    """unittest's checks (assert*, fail*, failureException, the equality functions) that a TestCase's
    class, a base class below unittest.TestCase, or the instance itself replaces with untrustworthy code."""
    bad = []
    spaces = [("instance", _getattr(inst, "__dict__", {}))]
    for c in _type(inst).__mro__:
        if c is _TESTCASE or c is object:
            break
        spaces.append((c.__name__, c.__dict__))
    for where, ns in spaces:
        for k in list(ns.keys()):
            if k not in _CASE_CHECKS:
                continue
            v = ns[k]
            if k == "failureException":
                if not (_isinstance(v, type) and issubclass(v, AssertionError)):
                    bad.append("%s.%s = %r" % (where, k, v))
                continue
            f = _func_of(v)
            why = "not a Python function" if f is None else _code_verdict(f.__code__)
            if why:
                bad.append("%s.%s: %s" % (where, k, why))
    return bad


def _own_behind(called, name):
    """The test's own function (compiled from its checked file, named `name`) held by the function called when
    that function comes from a repository file the patch changed (a decorator of the package): (holder, function),
    the holder a closure cell or (object, attribute) of a callable object; None when there is none to find."""
    first = _func_of(called)
    if first is None:
        return None
    why = _code_verdict(first.__code__)
    rp = _rp(first.__code__.co_filename) if first.__code__.co_filename else ""
    if why is None or not rp.startswith(_TESTBED) or rp[_len(_TESTBED):] not in _TOUCHED:
        return None
    todo = [called]
    seen = set()
    while todo and _len(seen) < 32:
        obj = todo.pop(0)
        f = _func_of(obj)
        if f is None or _id(f) in seen:
            continue
        seen.add(_id(f))
        held = []
        for cell in f.__closure__ or ():
            try:
                held.append((cell, cell.cell_contents))
            except ValueError:
                pass
        if not _isinstance(obj, (_FunctionType, _MethodType)):
            for k, v in list((_getattr(obj, "__dict__", None) or {}).items()):
                held.append(((obj, k), v))
        for holder, v in held:
            if not _isinstance(v, (_FunctionType, _MethodType)):
                continue
            g = _func_of(v)
            code = g.__code__
            if code.co_name == name and code.co_filename and _rp(code.co_filename) in _SOURCES and _code_verdict(code) is None:
                return holder, v
            todo.append(v)
    return None


def _hold(holder, value):
    """Puts `value` in a closure cell or an object's attribute (the holder _own_behind found)."""
    if _isinstance(holder, tuple):
        setattr(holder[0], holder[1], value)
    else:
        holder.cell_contents = value


def _check_called(nodeid, name, files, called, behind=None):
    """Reasons the function about to be called for test `name` is not the test on disk (empty: it is).
    `files`: the checked files its code may come from (its module's and the test-support modules').
    `behind`: the test's own function found behind an untrusted wrapper of a file the patch changed
    (_own_behind): the wrapper itself is then not a mismatch, its call of the test is recorded instead."""
    if _func_of(called) is None:
        return ["%s: calls a %s, which is not a Python function" % (nodeid, _type(called).__name__)]
    bad = []
    own = any(name in _SOURCES[p].names for p in files)
    reached = behind is not None
    for i, (f, why) in enumerate(_walk(called)):
        code = f.__code__
        in_sources = bool(code.co_filename) and _rp(code.co_filename) in _SOURCES
        if why and i == 0 and behind is not None:
            continue
        if why and (i == 0 or in_sources):
            # the function called must be trustworthy; a checked file's function anywhere behind it too
            bad.append(why)
        elif not why and in_sources and code.co_name == name:
            reached = True
        bad.extend(_mark_attrs(f))
    entry = _func_of(called)
    skipped = _getattr(entry, "__unittest_skip__", False) and any(name in _SOURCES[p].decorated for p in files)
    if own and not reached and not skipped:
        # (a test its source decorates with unittest.skip is replaced by unittest's skip_wrapper, verified above)
        bad.append("%s: the test's own function %s is not what is called" % (nodeid, name))
    inst = _getattr(called, "__self__", None)
    if inst is not None and _isinstance(inst, _TESTCASE):
        bad.extend(_case_overrides(inst))
    return bad


_FILES_FOR = {}


def _files_for(path):
    """The checked files a test's code may come from: its module's (`path`) and the test-support modules'."""
    hit = _FILES_FOR.get(path)
    if hit is not None:
        return hit
    out = _FILES_FOR[path] = []
    try:
        p = _rp(path)
        if p in _SOURCES:
            out.append(p)
    except Exception:
        pass
    for p in _SOURCES:
        if p not in out and _SOURCES[p].ok and p not in _MODULE_FILES:
            out.append(p)
    return out


# test files (as opposed to test-support modules): a name found only in a support module counts as the test's own
_MODULE_FILES = set(_realpath(p) for p in _cfg.get("testFiles", []))


def _class_marks(cls):
    """Skip attributes on the test's class that its source does not put there."""
    bad = []
    if cls is None:
        return bad
    for c in _getattr(cls, "__mro__", ()):
        d = _getattr(c, "__dict__", {})
        if "__unittest_skip__" in d or "pytestmark" in d:
            for s in _SOURCES.values():
                if c.__name__ in s.names:
                    if "__unittest_skip__" in d and c.__name__ not in s.decorated:
                        bad.append("class %s: has __unittest_skip__ but the source does not decorate it" % c.__name__)
                    break
    return bad


# ---------------------------------------------------------------------------------------------------
# snapshots of what runs tests and makes reports

def _runner_dir():
    if not _PYTEST:
        return os.path.dirname(os.path.abspath(_unittest.__file__))
    import _pytest

    return os.path.dirname(os.path.abspath(_pytest.__file__))


_RUNNER_DIR = _realpath(_runner_dir()) + os.sep
_SNAP_MODULES = [
    "pytest",
    "_pytest.runner",
    "_pytest.reports",
    "_pytest.skipping",
    "_pytest.python",
    "_pytest.python_api",
    "_pytest.unittest",
    "_pytest.main",
    "_pytest.outcomes",
    "_pytest._code.code",
    "_pytest.nodes",
    "_pytest.terminal",
    "_pytest.fixtures",
    "_pytest.assertion",
    "_pytest.assertion.rewrite",
    "_pytest.assertion.util",
    "_pytest.mark",
    "_pytest.mark.structures",
    "_pytest.warnings",
    "_pytest.recwarn",
    "_pytest.logging",
    "_pytest.capture",
    "_pytest.compat",
    "pluggy",
    "pluggy._callers",
    "pluggy._hooks",
    "pluggy._manager",
    "pluggy._result",
    "pluggy.callers",
    "pluggy.hooks",
    "pluggy.manager",
    "pluggy.result",
    "unittest",
    "unittest.case",
    "unittest.result",
    "unittest.suite",
    "unittest.loader",
    "unittest.runner",
    "unittest.main",
    "unittest.util",
    "builtins",
]
# checked again before every test call (value and code identity): what decides whether a test's call
# counts as raised or passed. ("module", "") is the module's own functions and classes.
_CORE = [
    ("unittest.case", "TestCase"),
    ("unittest.case", "_Outcome"),
    ("_pytest.outcomes", ""),
    ("_pytest.outcomes", "OutcomeException"),
    ("_pytest.outcomes", "Skipped"),
    ("_pytest.outcomes", "Failed"),
    ("_pytest._code.code", "ExceptionInfo"),
    ("_pytest.reports", "BaseReport"),
    ("_pytest.reports", "TestReport"),
    ("_pytest.runner", ""),
    ("_pytest.runner", "CallInfo"),
    ("_pytest.skipping", ""),
    ("_pytest.python", ""),
    ("_pytest.python", "Function"),
    ("_pytest.unittest", "TestCaseFunction"),
]


def _fingerprint(v):
    """What must stay the same about a snapshotted value, as a flat tuple compared by identity: the value,
    and for code its code object, defaults and closure cells (properties and static/class methods: those
    of their functions)."""
    if _isinstance(v, _FunctionType):
        cells = []
        for c in v.__closure__ or ():
            try:
                cells.append(c.cell_contents)
            except ValueError:
                cells.append(None)
        return (v, v.__code__, v.__defaults__, v.__kwdefaults__) + tuple(cells)
    if _isinstance(v, (staticmethod, classmethod)):
        return (v,) + _fingerprint(v.__func__)
    if _isinstance(v, property):
        return (v,) + _fingerprint(v.fget) + _fingerprint(v.fset) + _fingerprint(v.fdel)
    return (v,)


def _same_fp(a, b):
    if _len(a) != _len(b):
        return False
    for x, y in zip(a, b):
        if x is not y:
            return False
    return True


try:
    from operator import attrgetter as _attrgetter

    _get_code = _attrgetter("__code__")
except Exception:  # pragma: no cover

    def _get_code(f):
        return f.__code__


class _Watch(object):
    """The entries of one module's or class's namespace that the snapshot holds."""

    __slots__ = ("label", "ns", "owner", "entries", "keys", "bases", "fast", "fkeys", "fvals", "funcs", "codes")

    def __init__(self, label, ns, owner, values):
        self.label = label
        self.ns = ns  # the live namespace (a module __dict__ or a class mappingproxy)
        self.owner = owner  # the class, or None for a module
        self.entries = [(k, _fingerprint(v)) for k, v in values]
        self.keys = set(ns.keys()) if owner is not None else None
        self.bases = owner.__bases__ if owner is not None else None
        # the per-call check: the value and, for functions, its code object
        self.fast = [(k, fp[0], fp[1] if _len(fp) > 1 and _isinstance(fp[1], _CodeType) else None) for k, fp in self.entries]
        # the same, compared at C speed (list equality looks at identity first; functions, classes and
        # descriptors compare by identity, code objects by content)
        self.fkeys = tuple(k for k, _v, _c in self.fast)
        self.fvals = [v for _k, v, _c in self.fast]
        self.funcs = [v for _k, v, c in self.fast if c is not None]
        self.codes = [c for _k, _v, c in self.fast if c is not None]

    def quick_same(self):
        ns = self.ns
        if self.owner is not None and (_len(ns) != _len(self.keys) or self.owner.__bases__ is not self.bases):
            return False
        try:
            return list(map(ns.get, self.fkeys)) == self.fvals and list(map(_get_code, self.funcs)) == self.codes
        except Exception:
            return False

    def diff(self, full):
        if not full and self.quick_same():
            return []
        out = []
        ns = self.ns
        missing = _Watch
        if full:
            for k, fp in self.entries:
                v = ns.get(k, missing)
                if v is missing:
                    out.append("%s.%s (removed)" % (self.label, k))
                elif not _same_fp(fp, _fingerprint(v)):
                    out.append("%s.%s" % (self.label, k))
        else:
            for k, v0, code in self.fast:
                v = ns.get(k, missing)
                if v is not v0 or (code is not None and v.__code__ is not code):
                    out.append("%s.%s" % (self.label, k))
        if self.owner is not None:
            if self.owner.__bases__ is not self.bases:
                out.append(self.label + ".__bases__")
            if _len(ns) != _len(self.keys) or full:
                for k in list(ns.keys()):
                    if k not in self.keys and not _trusted_addition(k, ns[k]):
                        out.append("%s.%s (added)" % (self.label, k))
        return out


def _watch_module(mod):
    """The module's functions and classes, and the namespaces of the classes it defines (not builtins' types)."""
    name = mod.__name__
    out = []
    tracked = []
    for k, v in list(mod.__dict__.items()):
        if _isinstance(v, (_FunctionType, type, types.BuiltinFunctionType)):
            tracked.append((k, v))
            if _isinstance(v, type) and v.__module__ == name and name != "builtins":
                out.append(_Watch("%s:%s" % (name, k), v.__dict__, v, list(v.__dict__.items())))
    out.insert(0, _Watch(name, mod.__dict__, None, tracked))
    return out


def _trusted_addition(name, v):
    """A value added to a snapshotted class that does not change what it does: plain data (pytest marks
    its node classes with flags), pytest's own compatibility properties (legacypath adds `fspath`,
    `startdir` at configure time), or a helper from a checked file (the tests' own code)."""
    if v is None or _type(v) in (bool, int, float, str):
        return True
    if _isinstance(v, property):
        f = _func_of(v.fget) if v.fget is not None else None
    else:
        f = _func_of(v)
    if f is None or _code_verdict(f.__code__) is not None:
        return False
    rp = _rp(f.__code__.co_filename)
    if rp in _SOURCES:
        return True
    return not (name.startswith("__") and name.endswith("__")) and rp.startswith(_RUNNER_DIR)


_WATCHES = []
_CORE_WATCHES = []
_t = _cpu()
for _m in _SNAP_MODULES if _CHECKS else []:
    if not _PYTEST and (_m == "pytest" or _m.startswith("_pytest") or _m.startswith("pluggy")):
        continue
    _mod = sys.modules.get(_m)
    if _mod is None and not _m.startswith("pluggy.") and _m != "_pytest.compat":
        try:
            _mod = __import__(_m, fromlist=["_"])
        except Exception:
            _mod = None
    if _mod is None:
        continue
    for _w in _watch_module(_mod):
        _WATCHES.append(_w)
        for _cm, _ca in _CORE:
            if _cm == _m and _w.label == ("%s:%s" % (_cm, _ca) if _ca else _cm):
                _CORE_WATCHES.append(_w)
                break
_COST["snapshot"] = _cpu() - _t


def _changed(core_only=False):
    out = []
    if core_only:
        for w in _CORE_WATCHES:
            if not w.quick_same():
                out.extend(w.diff(False))
        return out
    for w in _WATCHES:
        out.extend(w.diff(True))
    if not core_only:
        for k, fp in _SELF.items():
            if not _same_fp(fp, _fingerprint(globals().get(k))):
                out.append("swerl:" + k)
    return out


def _tracers():
    out = []
    t = _gettrace()
    p = _getprofile()
    if t is not None and t is not _ALLOWED_TRACE:
        out.append("trace function %r" % (t,))
    if p is not None and p is not _ALLOWED_PROFILE:
        out.append("profile function %r" % (p,))
    mon = _getattr(sys, "monitoring", None)
    if mon is not None:
        for i in range(6):
            try:
                tool = mon.get_tool(i)
            except Exception:
                tool = None
            if tool is not None and _MONITORING.get(i) != tool:
                out.append("sys.monitoring tool %d (%s)" % (i, tool))
    return out


# set before any repository code (a coverage tracer, a debugger): allowed
_ALLOWED_TRACE = _gettrace()
_ALLOWED_PROFILE = _getprofile()
_MONITORING = {}
if _getattr(sys, "monitoring", None) is not None:
    for _i in range(6):
        try:
            _MONITORING[_i] = sys.monitoring.get_tool(_i)
        except Exception:
            pass




_SELF_MODULE = sys.modules[__name__]
_counts = {"logstart": 0, "deselected": 0}
_tampered = []


def _classify(e):
    if _XFailed is not None and _isinstance(e, _XFailed):
        return "xfail"
    if (_Skipped is not None and _isinstance(e, _Skipped)) or _isinstance(e, _SkipTest):
        return "skip"
    if _Exit is not None and _isinstance(e, _Exit):
        return "exit"
    if _isinstance(e, KeyboardInterrupt):
        return "interrupt"
    return "fail"


def _raised_in(e):
    """The innermost repository file (outside the checked tests) the exception passed through."""
    tb = _getattr(e, "__traceback__", None)
    last = None
    while tb is not None:
        fn = tb.tb_frame.f_code.co_filename
        if fn:
            rp = _rp(fn)
            if rp.startswith(_TESTBED) and rp not in _SOURCES:
                last = rp[_len(_TESTBED):]
        tb = tb.tb_next
    return last


def _recording(rec, target, own=False):
    """`target` behind a function that records whether its call returned or raised (and what); `own`: the
    test's own function called by an untrusted wrapper (own_called, own_raised: a raise is kept once seen)."""
    called, raised, exc = ("own_called", "own_raised", "own_exc") if own else ("called", "raised", "exc")

    def swerl_test_call(*args, **kwargs):
        __tracebackhide__ = True
        rec[called] = True
        tr = _tracers()
        if tr:
            rec["trace"] = tr
        try:
            result = target(*args, **kwargs)
        except _BaseException as e:
            rec[raised] = _classify(e)
            rec[exc] = _type(e).__module__ + "." + _type(e).__name__
            origin = _raised_in(e)
            if origin is not None and not own:
                rec["raised_in"] = origin
            raise
        if not own or rec.get(raised) is None:
            rec[raised] = None
        return result

    if _wraps is not None:
        try:
            swerl_test_call = _wraps(target)(swerl_test_call)
        except Exception:
            pass
    return swerl_test_call


def _before_call(rec, nodeid, name, path, called):
    """The checks made just before a test is called, into its record; returns what _own_behind found (or None)."""
    t = _cpu()
    behind = None
    try:
        behind = _own_behind(called, name)
        if behind is not None:
            f = _func_of(called)
            rec["via"] = "%s (%s:%d)" % (f.__code__.co_name, f.__code__.co_filename, f.__code__.co_firstlineno)
        bad = _check_called(nodeid, name, _files_for(path), called, behind)
        changed = _changed(core_only=True)
        if changed:
            bad.append("replaced before the call: " + ", ".join(changed))
        if bad:
            rec.setdefault("mismatch", []).extend(bad)
    except Exception as e:
        rec.setdefault("mismatch", []).append("checking %s failed: %r" % (nodeid, e))
    rec["verified"] = not rec.get("mismatch")
    _COST["calls"] += _cpu() - t
    return behind


def _finish_changes():
    t = _cpu()
    changed = _changed() if _CHECKS else []
    _COST["finish"] = _cpu() - t
    for c in changed:
        if c not in _tampered:
            _tampered.append(c)
    return _tampered


# ---------------------------------------------------------------------------------------------------
# pytest

if _PYTEST:
    _config = None
    _items = {}
    _TestReport = _getattr(sys.modules.get("_pytest.reports"), "TestReport", None)

    def _is_controller(config):
        # pytest-xdist workers report to the controller, which records them
        return not hasattr(config, "workerinput") and not hasattr(config, "slaveinput")

    @pytest.hookimpl(tryfirst=True)
    def pytest_load_initial_conftests(early_config, parser, args):
        # registered under its per-run name; no longer findable by that name before any conftest runs
        sys.modules.pop(__name__, None)

    _maxfail = [0]

    def pytest_configure(config):
        global _config
        if _config is None and _is_controller(config):
            _config = config
            # a canary must fail: under -x / --maxfail the run would stop there and leave tests unrun
            try:
                if _CHECKS and int(config.getoption("maxfail") or 0) > 0:
                    _maxfail[0] = int(config.getoption("maxfail"))
                    config.option.maxfail = 0
            except Exception:
                pass

    def pytest_runtest_logstart(nodeid, location):
        _counts["logstart"] += 1

    def pytest_deselected(items):
        _counts["deselected"] += len(items)

    def _nodeid(nodeid):
        # the id as `-rA` prints it (relative to the invocation directory), which is what SWE-bench lists
        try:
            return _config.cwd_relative_nodeid(nodeid)
        except Exception:
            return nodeid

    def _item_path(item):
        return str(_getattr(item, "path", None) or item.fspath)

    def _checked(item):
        try:
            return _rp(_item_path(item)) in _SOURCES
        except Exception:
            return False

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_protocol(item, nextitem):
        if _config is None or not _CHECKS or not _checked(item):
            yield
            return
        rec = {"event": "item", "nodeid": _nodeid(item.nodeid), "called": False}
        _items[_id(item)] = (item, rec)
        try:
            # skip marks act at setup, before the call: checked now
            bad = _class_marks(_getattr(item, "cls", None))
            obj = _getattr(item, "obj", None)
            if obj is not None:
                for f, _why in _walk(obj):
                    bad.extend(_mark_attrs(f))
            if bad:
                rec["mismatch"] = bad
        except Exception as e:
            rec.setdefault("mismatch", []).append("checking %s failed: %r" % (item.nodeid, e))
        try:
            yield
        finally:
            _items.pop(_id(item), None)
            _write(rec)

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_call(item):
        entry = _items.get(_id(item))
        if entry is None or entry[0] is not item:
            yield
            return
        rec = entry[1]
        original = None
        behind = None
        try:
            original = item.obj
            name = _getattr(item, "originalname", None) or item.name.split("[")[0]
            behind = _before_call(rec, item.nodeid, name, _item_path(item), original)
            if _iscoroutinefunction is not None and (_iscoroutinefunction(original) or _iscoroutinefunction(_func_of(original))):
                rec["unwrapped"] = "async"
                behind = None
            else:
                item.obj = _recording(rec, original)
                if behind is not None:
                    _hold(behind[0], _recording(rec, behind[1], own=True))
        except Exception as e:
            rec["verified"] = False
            rec.setdefault("mismatch", []).append("checking %s failed: %r" % (item.nodeid, e))
        try:
            yield
        finally:
            if original is not None:
                try:
                    item.obj = original
                except Exception:
                    pass
            if behind is not None:
                try:
                    _hold(behind[0], behind[1])
                except Exception:
                    pass

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(report):
        if _config is None:
            return
        rec = {
            "event": "test",
            "nodeid": _nodeid(report.nodeid),
            "when": report.when,
            "outcome": report.outcome,
            "xfail": hasattr(report, "wasxfail"),
        }
        if _TestReport is not None and type(report) is not _TestReport:
            rec["foreign_report"] = type(report).__module__ + "." + type(report).__name__
        _write(rec)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collectreport(report):
        if _config is not None and report.failed:
            _write({"event": "collect", "nodeid": _nodeid(report.nodeid), "outcome": report.outcome})

    def _impl_file(impl):
        fn = getattr(impl, "function", None)
        code = getattr(fn, "__code__", None)
        if code is not None:
            return os.path.abspath(code.co_filename)
        mod = getattr(impl, "plugin", None)
        return os.path.abspath(getattr(mod, "__file__", "") or "?")

    # hooks through which a plugin can change which tests run or what their reports say (not those that only
    # print, or set the exit status, which is cross-checked with the records)
    _AUDITED_HOOKS = [
        "pytest_runtest_makereport",
        "pytest_runtest_logreport",
        "pytest_report_teststatus",
        "pytest_runtest_protocol",
        "pytest_runtest_setup",
        "pytest_runtest_call",
        "pytest_runtest_teardown",
        "pytest_pyfunc_call",
        "pytest_runtestloop",
        "pytest_collection_modifyitems",
        "pytest_collection",
        "pytest_collect_file",
        "pytest_pycollect_makeitem",
        "pytest_deselected",
        "pytest_make_collect_report",
        "pytest_collectreport",
    ]

    def _audit(config):
        impls = []
        pm = config.pluginmanager
        for name in _AUDITED_HOOKS:
            caller = getattr(pm.hook, name, None)
            if caller is None:
                continue
            try:
                found = caller.get_hookimpls()
            except Exception:
                continue
            for impl in found:
                if _getattr(impl, "plugin", None) is _SELF_MODULE:
                    continue  # ours: checked with the snapshots
                f = _impl_file(impl)
                impls.append({"hook": name, "plugin": str(getattr(impl, "plugin_name", "?")), "file": f, "exists": os.path.isfile(f)})
        plugins = []
        for name, plugin in pm.list_name_plugin():
            f = getattr(plugin, "__file__", None)
            if f:
                plugins.append({"name": str(name), "file": os.path.abspath(f)})
        return {"hookimpls": impls, "plugins": plugins}

    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_sessionfinish(session, exitstatus):
        yield
        if _config is None:
            return
        status = getattr(session, "exitstatus", exitstatus)
        _write({
            "event": "finish",
            "exitstatus": int(status),
            "testscollected": int(getattr(session, "testscollected", -1)),
            "testsfailed": int(getattr(session, "testsfailed", -1)),
            "logstart": _counts["logstart"],
            "deselected": _counts["deselected"],
            "shouldstop": bool(getattr(session, "shouldstop", False)),
            "shouldfail": bool(getattr(session, "shouldfail", False)),
            "changed": _finish_changes(),
            "audit": _audit(_config),
            "cost_s": dict((k, round(v, 4)) for k, v in _COST.items()),
            "maxfail_lifted": _maxfail[0],
        })


# ---------------------------------------------------------------------------------------------------
# unittest (python -m unittest, Django's runner): every TestCase's test method is called through
# TestCase._callTestMethod (Python 3.8+), which the plugin wraps before the code under test is imported

_UNITTEST_HOOKED = False
if not _PYTEST and _CHECKS:
    _orig_call_test_method = _TESTCASE.__dict__.get("_callTestMethod")

    def _unittest_call(self, method):
        __tracebackhide__ = True
        cls = _type(self)
        mod = sys.modules.get(cls.__module__)
        path = _getattr(mod, "__file__", None) or ""
        if not path or _rp(path) not in _SOURCES:
            return _orig_call_test_method(self, method)
        name = _getattr(self, "_testMethodName", "")
        rec = {"event": "item", "nodeid": str(self), "id": self.id(), "called": False}
        rec["legacy"] = "%s (%s.%s)" % (name, cls.__module__, cls.__qualname__)
        try:
            doc = self.shortDescription()
            if doc:
                rec["doc"] = doc
        except Exception:
            pass
        try:
            bad = _class_marks(cls)
            if bad:
                rec["mismatch"] = bad
        except Exception:
            pass
        behind = _before_call(rec, rec["id"], name, path, method)
        if behind is not None:
            _hold(behind[0], _recording(rec, behind[1], own=True))
        try:
            return _orig_call_test_method(self, _recording(rec, method))
        finally:
            if behind is not None:
                _hold(behind[0], behind[1])
            _write(rec)

    if _orig_call_test_method is not None:
        _TESTCASE._callTestMethod = _unittest_call
        _UNITTEST_HOOKED = True
        # the snapshot of unittest.case must hold the wrapper, not the original
        for _w in _WATCHES:
            if _w.owner is _TESTCASE:
                _w.__init__(_w.label, _TESTCASE.__dict__, _TESTCASE, list(_TESTCASE.__dict__.items()))

    import atexit as _atexit

    def _unittest_finish():
        _write({"event": "finish", "exitstatus": -1, "testscollected": -1, "testsfailed": -1, "logstart": -1, "deselected": -1,
                "shouldstop": False, "shouldfail": False, "changed": _finish_changes(), "audit": {"hookimpls": [], "plugins": []},
                "cost_s": dict((k, round(v, 4)) for k, v in _COST.items())})

    _atexit.register(_unittest_finish)


# a second, out-of-band sign that the channel came up: if the records are gone afterwards, the run
# removed them (the agent's doing, scored 0), it did not fail to start (infrastructure)
sys.stderr.write("[swerl-grade] results plugin loaded\n")
sys.stderr.flush()

_write({
    "event": "start",
    "pid": os.getpid(),
    "python": sys.version.split()[0],
    "pytest": _getattr(sys.modules.get("pytest"), "__version__", "?"),
    "runner_dir": _runner_dir(),
    # modules loaded from /testbed before this plugin: they ran before the snapshots
    "preloaded": sorted(
        n for n, m in list(sys.modules.items())
        if (_getattr(m, "__file__", None) or "").startswith(_TESTBED)
    ),
    "checked_files": sorted(p[_len(_TESTBED):] if p.startswith(_TESTBED) else p for p, s in _SOURCES.items() if s.ok),
    "precompile_s": round(_COST["precompile"], 4),
    "primed": _PRIMED,
    "checks": _CHECKS,
    "runner": _RUNNER,
    "unittest_hooked": _UNITTEST_HOOKED,
})

# our own functions, checked like pytest's (defined last so every hook is in it)
_SELF = dict((k, _fingerprint(v)) for k, v in list(globals().items()) if _isinstance(v, _FunctionType))
