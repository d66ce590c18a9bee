# The grader's pytest results channel (activities/grade.ts). Copied into the grading container outside
# /testbed under a per-run random module name, put on sys.path by a .pth file in the interpreter's site
# directory and loaded with `-p` before any conftest or test module, so it runs before the code under
# test. It writes one JSON record a line to RESULTS_PATH (outside /testbed):
#   start   at import (proves the channel came up before any repository code ran)
#   test    each TestReport as pytest made it (nodeid as -rA prints it, phase, outcome, xfail)
#   collect each failed collection
#   finish  exit status, counts, and an audit: who implements the reporting hooks, and whether pytest's
#           own reporting functions are still the ones that were loaded before the code under test.
# Python 3.5+ and pytest 4+: no f-strings, no annotations. The grader substitutes RESULTS_PATH.
import json
import os
import sys

import pytest

RESULTS_PATH = "__SWERL_RESULTS_PATH__"
_out = open(RESULTS_PATH, "a")


def _write(rec):
    _out.write(json.dumps(rec, sort_keys=True) + "\n")
    _out.flush()


def _resolve(modname, dotted):
    """The raw object at module.Class.attr (class __dict__ entries, so methods and properties compare by identity)."""
    mod = sys.modules.get(modname)
    if mod is None:
        try:
            mod = __import__(modname, fromlist=["_"])
        except Exception:
            return None
    obj = mod
    for part in dotted.split("."):
        d = getattr(obj, "__dict__", {})
        if part in d:
            obj = d[part]
        else:
            obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


# pytest's and pluggy's functions that make, carry and count reports: replacing one in-process would
# change what is reported without registering a hook.
_WATCHED = [
    ("_pytest.runner", "call_and_report"),
    ("_pytest.runner", "runtestprotocol"),
    ("_pytest.runner", "pytest_runtest_protocol"),
    ("_pytest.runner", "pytest_runtest_makereport"),
    ("_pytest.runner", "call_runtest_hook"),
    ("_pytest.runner", "CallInfo.from_call"),
    ("_pytest.reports", "TestReport"),
    ("_pytest.reports", "TestReport.from_item_and_call"),
    ("_pytest.reports", "TestReport.__init__"),
    ("_pytest.reports", "BaseReport.passed"),
    ("_pytest.reports", "BaseReport.failed"),
    ("_pytest.reports", "BaseReport.skipped"),
    ("_pytest.skipping", "pytest_runtest_makereport"),
    ("_pytest.skipping", "pytest_runtest_setup"),
    ("_pytest.skipping", "pytest_runtest_call"),
    ("_pytest.skipping", "evaluate_xfail_marks"),
    ("_pytest.skipping", "evaluate_skip_marks"),
    ("_pytest.python", "Function.runtest"),
    ("_pytest.python", "pytest_pyfunc_call"),
    ("_pytest.unittest", "TestCaseFunction.runtest"),
    ("_pytest.unittest", "pytest_runtest_makereport"),
    ("_pytest.main", "pytest_runtestloop"),
    ("_pytest.main", "Session.perform_collect"),
    ("_pytest.main", "pytest_collection_modifyitems"),
    ("_pytest.mark", "pytest_collection_modifyitems"),
    ("_pytest.mark", "deselect_by_keyword"),
    ("_pytest.mark", "deselect_by_mark"),
    ("_pytest.terminal", "TerminalReporter.pytest_runtest_logreport"),
    ("pluggy._callers", "_multicall"),
    ("pluggy._hooks", "_HookCaller.__call__"),
    ("pluggy._hooks", "HookCaller.__call__"),
    ("pluggy._hooks", "HookImpl.__init__"),
    ("pluggy._manager", "PluginManager._hookexec"),
    ("pluggy._manager", "PluginManager.register"),
    ("pluggy.callers", "_multicall"),
    ("pluggy.hooks", "_HookCaller.__call__"),
    ("pluggy.manager", "PluginManager._hookexec"),
    ("pluggy.manager", "PluginManager.register"),
]
_SNAPSHOT = {}
for _m, _a in _WATCHED:
    _o = _resolve(_m, _a)
    if _o is not None:
        _SNAPSHOT[_m + ":" + _a] = _o
_TestReport = _resolve("_pytest.reports", "TestReport")

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


_SELF = {}


def _changed():
    out = []
    for k, v in _SNAPSHOT.items():
        m, a = k.split(":", 1)
        if _resolve(m, a) is not v:
            out.append(k)
    for k, v in _SELF.items():
        if globals().get(k) is not v:
            out.append("swerl:" + k)
    return out


def _runner_dir():
    import _pytest

    return os.path.dirname(os.path.abspath(_pytest.__file__))


# a second, out-of-band sign that the channel came up: if the results file is gone afterwards, the run
# removed it (the agent's doing, scored 0), it did not fail to start (infrastructure)
sys.stderr.write("[swerl-grade] %s loaded\n" % __name__)
sys.stderr.flush()

_write({
    "event": "start",
    "pid": os.getpid(),
    "python": sys.version.split()[0],
    "pytest": getattr(pytest, "__version__", "?"),
    "runner_dir": _runner_dir(),
    # modules loaded from /testbed before this plugin: they ran before the audit's snapshot
    "preloaded": sorted(
        n for n, m in list(sys.modules.items())
        if (getattr(m, "__file__", None) or "").startswith("/testbed/")
    ),
})

_config = None
_counts = {"logstart": 0, "deselected": 0}
_tampered = []


def _is_controller(config):
    # pytest-xdist workers report to the controller, which records them
    return not hasattr(config, "workerinput") and not hasattr(config, "slaveinput")


def pytest_configure(config):
    global _config
    if _config is None and _is_controller(config):
        _config = config


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
    changed = _changed()
    if changed and not _tampered:
        _tampered.extend(changed)
        rec["changed"] = changed
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
    changed = _changed()
    for c in changed:
        if c not in _tampered:
            _tampered.append(c)
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
        "changed": _tampered,
        "audit": _audit(_config),
    })


# our own functions, checked like pytest's (defined last so every hook is in it)
_SELF.update((k, v) for k, v in list(globals().items()) if k.startswith("pytest_") or k in ("_write", "_resolve", "_changed", "_audit"))
