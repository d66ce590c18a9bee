# A small real pytest suite covering what log parsers get wrong: parametrised ids with spaces,
# brackets and " - ", messages holding "]" on FAILED/XFAIL/XPASS lines, setup and teardown errors,
# skips with reasons, unittest-style classes, output that looks like status lines.
import sys
import unittest

import pytest


def test_pass():
    assert True


def test_fail_bracket_message():
    assert False, "bad value [x] - see [y]"


@pytest.mark.parametrize("v", ["a b", "x]y", "1 - 2", "[nested]", "tab\there", "é"])
def test_param_pass(v):
    assert v


@pytest.mark.parametrize("v", ["c d", "p]q"])
def test_param_fail(v):
    assert v == "nope", "mismatch [%s]" % v


@pytest.mark.parametrize("a,b", [(1, 2), ([1], [2])])
def test_param_multi(a, b):
    assert a != b


@pytest.mark.xfail(reason="known bug [123] - upstream")
def test_xfail_bracket_reason():
    assert False


@pytest.mark.xfail(reason="fixed upstream [456]")
def test_xpass_bracket_reason():
    assert True


@pytest.mark.xfail(strict=True, reason="strict [789]")
def test_xpass_strict():
    assert True


@pytest.mark.parametrize("v", ["m n", "r]s"])
@pytest.mark.xfail(reason="param xfail [9]")
def test_param_xfail(v):
    assert False


@pytest.mark.skip(reason="needs network [offline]")
def test_skip_reason():
    pass


@pytest.mark.skipif(sys.version_info > (3,), reason="python 3 [any]")
def test_skipif_reason():
    pass


def test_skip_inside():
    pytest.skip("decided at run time")


@pytest.fixture
def broken_setup():
    raise RuntimeError("setup [boom]")


def test_setup_error(broken_setup):
    pass


@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown [boom]")


def test_teardown_error(broken_teardown):
    pass


def test_prints_status_lookalikes(capsys):
    print("PASSED test_pt.py::test_not_a_real_test")
    print("FAILED test_pt.py::test_pass - fake")
    assert True


def test_prints_and_fails():
    print("PASSED test_pt.py::test_also_fake")
    assert 1 == 2


class TestGroup:
    def test_in_class(self):
        assert True

    @pytest.mark.parametrize("v", ["u v"])
    def test_in_class_param(self, v):
        assert False, "class [fail]"


class UnitStyle(unittest.TestCase):
    def test_ok(self):
        """A docstring that pytest ignores."""
        self.assertTrue(True)

    def test_fail(self):
        self.assertEqual([1], [2])

    @unittest.skip("unittest skip [reason]")
    def test_skipped(self):
        pass

    @unittest.expectedFailure
    def test_expected_failure(self):
        self.assertTrue(False)
