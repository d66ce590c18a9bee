# A small real sympy-runner suite (copied into the sympy package, run by sympy's own test runner
# as bin/test does): passes, failures, errors, skips with reasons, XFAIL/XPASS, slow tests, output.
from sympy.testing.pytest import XFAIL, raises, skip, slow


def test_pass():
    assert 1 + 1 == 2


def test_fail():
    assert [1] == [2], "mismatch [x]"


def test_error():
    raise RuntimeError("boom [y]")


def test_skip_reason():
    skip("needs network [offline]")


@XFAIL
def test_xfail():
    assert False


@XFAIL
def test_xpass():
    assert True


@slow
def test_slow():
    assert True


def test_prints():
    print("output of the test")
    assert True


def test_raises():
    raises(ZeroDivisionError, lambda: 1 / 0)


def test_last_passes():
    assert True
