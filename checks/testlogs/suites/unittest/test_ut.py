# A small real unittest suite: docstrings (one and several lines), output printed between "..." and
# the status, skips with reasons, expected failures, unexpected successes, errors, subtests.
import sys
import unittest


class Basics(unittest.TestCase):
    def test_pass(self):
        self.assertTrue(True)

    def test_fail(self):
        self.assertEqual([1], [2], "mismatch [x]")

    def test_error(self):
        raise RuntimeError("boom [y]")

    def test_docstring(self):
        """Checks that a docstring's first line is printed."""
        self.assertTrue(True)

    def test_docstring_multiline(self):
        """First line of a long docstring.

        More text that unittest does not print.
        """
        self.assertTrue(True)

    def test_docstring_fails(self):
        """A documented test that fails."""
        self.assertTrue(False)

    @unittest.skip("needs network [offline]")
    def test_skip_reason(self):
        pass

    def test_skip_inside(self):
        self.skipTest("decided at run time")

    @unittest.expectedFailure
    def test_expected_failure(self):
        self.assertTrue(False)

    @unittest.expectedFailure
    def test_unexpected_success(self):
        self.assertTrue(True)


class Output(unittest.TestCase):
    def test_prints_to_stderr(self):
        sys.stderr.write("some output of the test\nover two lines\n")
        sys.stderr.flush()

    def test_prints_to_stdout(self):
        print("stdout output of the test", flush=True)

    def test_prints_status_lookalike(self):
        sys.stderr.write("test_fake (x.Y) ... ok\n")
        sys.stderr.flush()
        self.assertTrue(True)


class SubTests(unittest.TestCase):
    def test_subtests(self):
        for i in range(3):
            with self.subTest(i=i):
                self.assertLess(i, 2)
