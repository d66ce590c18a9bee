# Runs the fixture files with sympy's own runner as `bin/test -C --verbose` does (in-process, so the
# reporter can be watched), recording what each test really did into $SWERL_TRUTH.
import json
import os
import sys

try:
    from sympy.testing import runtests
except ImportError:  # sympy < 1.6
    from sympy.utilities import runtests

import sympy

TRUTH = []
R = runtests.PyTestReporter
_current = {}


def _wrap(name, outcome):
    orig = getattr(R, name)

    def wrapped(self, *a, **k):
        f = _current.get("f")
        TRUTH.append({"file": getattr(self, "_active_file", None), "name": f.__name__ if f else None, "outcome": outcome(a) if callable(outcome) else outcome})
        return orig(self, *a, **k)

    setattr(R, name, wrapped)


_entering = R.entering_test


def entering_test(self, f):
    _current["f"] = f
    return _entering(self, f)


R.entering_test = entering_test
_wrap("test_pass", "PASSED")
_wrap("test_fail", "FAILED")
_wrap("test_exception", "ERROR")
_wrap("test_skip", "SKIPPED")
_wrap("test_xfail", "XFAIL")
_wrap("test_xpass", "XPASS")

pkg = os.path.dirname(sympy.__file__)
# sympy.test is pytest-based from 1.13 on; bin/test runs this classic runner
ok = runtests.test("sympy/swerl_fixture/tests", verbose=True, colors=False, subprocess=False)
with open(os.environ["SWERL_TRUTH"], "w") as f:
    json.dump(TRUTH, f, indent=1)
sys.exit(0 if ok else 1)
