# A small real Django suite (run by runtests.py as Django's own tests/runtests.py runs its suite):
# docstrings, output printed between "..." and the status, skips with reasons, expected failures,
# errors, database tests.
import sys
import unittest

from django.contrib.auth.models import User
from django.test import SimpleTestCase, TestCase


class SimpleTests(SimpleTestCase):
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
        """
        A docstring that starts on its second line.

        More text.
        """
        self.assertTrue(True)

    def test_docstring_fails(self):
        """A documented test that fails."""
        self.assertTrue(False)

    @unittest.skip("needs network [offline]")
    def test_skip_reason(self):
        pass

    @unittest.expectedFailure
    def test_expected_failure(self):
        self.assertTrue(False)

    @unittest.expectedFailure
    def test_unexpected_success(self):
        self.assertTrue(True)

    def test_prints_to_stderr(self):
        sys.stderr.write("Internal output of the test\nSystem check identified no issues (0 silenced).\n")
        sys.stderr.flush()

    def test_prints_to_stdout(self):
        print("stdout output of the test", flush=True)


class DatabaseTests(TestCase):
    def test_create_user(self):
        User.objects.create(username="a")
        self.assertEqual(User.objects.count(), 1)

    def test_query_fails(self):
        """Counting users in an empty table."""
        self.assertEqual(User.objects.count(), 5)
