# Django's DiscoverRunner with a result class that also records what each test really did
# ($SWERL_TRUTH): its description as printed and its outcome. The printed output is unchanged.
import json
import os
import unittest

from django.test.runner import DiscoverRunner

TRUTH = []


class RecordingResult(unittest.TextTestResult):
    def _rec(self, test, outcome):
        TRUTH.append({"id": test.id(), "str": str(test), "description": self.getDescription(test), "outcome": outcome})

    def addSuccess(self, test):
        super().addSuccess(test)
        self._rec(test, "PASSED")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._rec(test, "FAILED")

    def addError(self, test, err):
        super().addError(test, err)
        self._rec(test, "ERROR")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._rec(test, "SKIPPED")

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._rec(test, "XFAIL")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._rec(test, "XPASS")


class RecordingRunner(DiscoverRunner):
    def get_resultclass(self):
        return RecordingResult

    def run_tests(self, *args, **kwargs):
        try:
            return super().run_tests(*args, **kwargs)
        finally:
            with open(os.environ["SWERL_TRUTH"], "w") as f:
                json.dump(TRUTH, f, indent=1)
