"""The task factory's pytest plugin (activities/factory-lane.ts loads it with `-p swerl_factory_pytest`).

Writes one JSON line per test to $SWERL_FACTORY_OUT: its outcome as pytest's -rA summary names it, its
duration, and for a failure the crash message and the traceback entries (the factory keeps the test
files' frames for the problem statement). With $SWERL_FACTORY_COVER it also records, per test, the
functions the test ran (a global trace function that only notes code objects: no line events), so the
factory can select the tests a mutated function can change. $SWERL_FACTORY_SELECT names a file of node
ids: only those run, in that order, and other test files are not even imported. $SWERL_FACTORY_LIMITS names a
JSON file of per-test limits in seconds ("*": the default): a test's call past its limit fails (SIGALRM) and is
marked, so a bug that makes a test hang costs seconds, not the whole run's limit.
This plugin serves the factory's own runs of code it mutated itself; grading never loads it.
"""

import json
import os
import signal
import sys
import threading

_OUT = os.environ.get("SWERL_FACTORY_OUT")
_COVER = os.environ.get("SWERL_FACTORY_COVER") == "1"
_SELECT = os.environ.get("SWERL_FACTORY_SELECT")
_LIMITS = os.environ.get("SWERL_FACTORY_LIMITS")
MAX_LINES = 40
MAX_CHARS = 4000


class TestTimeout(Exception):
    """A test's call ran past its limit."""


def _read_limits():
    if not _LIMITS:
        return {}
    with open(_LIMITS, encoding="utf-8") as f:
        return json.load(f)


def _read_select():
    if not _SELECT:
        return None
    with open(_SELECT, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f if line.strip()]


class _Recorder:
    def __init__(self, config):
        self.rootdir = str(config.rootpath)
        self.out = open(_OUT, "w", encoding="utf-8") if _OUT else None
        self.phases = {}
        self.select = _read_select()
        self.select_files = None
        if self.select is not None:
            self.select_files = {nodeid.split("::", 1)[0] for nodeid in self.select}
        self.code_ids = {}
        self.seen = None
        self.limits = _read_limits()
        self.timed_out = set()
        self.current = None

    def emit(self, obj):
        if self.out is not None:
            self.out.write(json.dumps(obj) + "\n")
            self.out.flush()

    # --- selection -------------------------------------------------------------------------
    def ignore(self, path):
        if self.select_files is None or not os.path.isfile(str(path)):
            return None
        name = os.path.basename(str(path))
        if name in ("__init__.py", "conftest.py"):
            return None
        rel = os.path.relpath(str(path), self.rootdir).replace(os.sep, "/")
        return True if rel not in self.select_files else None

    def reorder(self, items, config):
        if self.select is None:
            return
        rank = {nodeid: i for i, nodeid in enumerate(self.select)}
        keep = [it for it in items if it.nodeid in rank]
        dropped = [it for it in items if it.nodeid not in rank]
        keep.sort(key=lambda it: rank[it.nodeid])
        items[:] = keep
        if dropped:
            config.hook.pytest_deselected(items=dropped)

    # --- coverage --------------------------------------------------------------------------
    def _trace(self, frame, event, arg):
        self.seen.add(frame.f_code)
        return None

    def cover_start(self):
        self.seen = set()
        threading.settrace(self._trace)
        sys.settrace(self._trace)

    def cover_stop(self):
        sys.settrace(None)
        threading.settrace(None)
        ids = []
        for code in self.seen:
            fn = code.co_filename
            if not fn.startswith(self.rootdir + os.sep):
                continue
            key = (fn, code.co_firstlineno)
            idx = self.code_ids.get(key)
            if idx is None:
                idx = len(self.code_ids)
                self.code_ids[key] = idx
                rel = os.path.relpath(fn, self.rootdir).replace(os.sep, "/")
                self.emit({"fn": idx, "file": rel, "line": code.co_firstlineno})
            ids.append(idx)
        self.seen = None
        return sorted(ids)

    # --- reports ---------------------------------------------------------------------------
    def report(self, rep):
        st = self.phases.setdefault(rep.nodeid, {"outcome": None, "duration": 0.0, "failure": None})
        st["duration"] += getattr(rep, "duration", 0.0) or 0.0
        xfail = hasattr(rep, "wasxfail")
        if rep.when == "call":
            if rep.passed:
                st["outcome"] = "XPASS" if xfail else "PASSED"
            elif rep.skipped:
                st["outcome"] = "XFAIL" if xfail else "SKIPPED"
            else:
                st["outcome"] = "FAILED"
                st["failure"] = _failure(rep)
        elif rep.failed:
            st["outcome"] = "ERROR"
            st["failure"] = st["failure"] or _failure(rep)
        elif rep.skipped and st["outcome"] is None:
            st["outcome"] = "XFAIL" if xfail else "SKIPPED"

    def finish(self, nodeid, funcs):
        st = self.phases.pop(nodeid, None)
        if st is None:
            return
        rec = {"t": nodeid, "o": st["outcome"] or "ERROR", "d": round(st["duration"], 4)}
        if st["failure"]:
            rec["f"] = st["failure"]
        if funcs is not None:
            rec["c"] = funcs
        if nodeid in self.timed_out:
            rec["to"] = 1
        self.emit(rec)


def _clip(s):
    return s if len(s) <= MAX_CHARS else s[:MAX_CHARS] + "..."


def _failure(rep):
    """The crash message and the traceback entries (path, line, source lines) of a failed phase."""
    lr = rep.longrepr
    out = {"crash": "", "entries": []}
    chain = getattr(lr, "chain", None)
    tb, crash = (chain[-1][0], chain[-1][1]) if chain else (getattr(lr, "reprtraceback", None), getattr(lr, "reprcrash", None))
    if crash is not None:
        out["crash"] = _clip(str(getattr(crash, "message", "")))
    for entry in getattr(tb, "reprentries", None) or []:
        loc = getattr(entry, "reprfileloc", None)
        lines = [str(x) for x in (getattr(entry, "lines", None) or [])][-MAX_LINES:]
        out["entries"].append(
            {
                "path": str(getattr(loc, "path", "")),
                "line": getattr(loc, "lineno", 0),
                "lines": [_clip(x) for x in lines],
            }
        )
    if not out["entries"] and not out["crash"]:
        out["crash"] = _clip(str(lr))
    return out


_rec = None


def pytest_configure(config):
    global _rec
    _rec = _Recorder(config)


def pytest_ignore_collect(collection_path, config):
    return _rec.ignore(collection_path) if _rec else None


def pytest_collection_modifyitems(session, config, items):
    if _rec:
        _rec.reorder(items, config)


def pytest_collectreport(report):
    if _rec and report.failed:
        _rec.emit({"collect_error": report.nodeid, "f": _failure(report)})


def pytest_runtest_logreport(report):
    if _rec:
        _rec.report(report)


try:
    import pytest

    @pytest.hookimpl(hookwrapper=True)
    def _alarm(signum, frame):
        if _rec and _rec.current:
            _rec.timed_out.add(_rec.current)
        raise TestTimeout("swerl-factory: the test ran past its limit")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(item):
        limit = (_rec.limits.get(item.nodeid) or _rec.limits.get("*")) if _rec else None
        armed = bool(limit) and threading.current_thread() is threading.main_thread()
        if armed:
            _rec.current = item.nodeid
            previous = signal.signal(signal.SIGALRM, _alarm)
            signal.setitimer(signal.ITIMER_REAL, float(limit))
        try:
            yield
        finally:
            if armed:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
                _rec.current = None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        if _COVER and _rec:
            _rec.cover_start()
        try:
            yield
        finally:
            funcs = _rec.cover_stop() if (_COVER and _rec) else None
            if _rec:
                _rec.finish(item.nodeid, funcs)

except ImportError:  # imported outside pytest
    pass


def pytest_unconfigure(config):
    if _rec and _rec.out is not None:
        _rec.out.close()
