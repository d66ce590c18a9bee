# Runs a unittest module as `python -m unittest -v MODULE` does (same TextTestRunner, same output) and
# records what each test really did into $SWERL_TRUTH: its description as printed and its outcome.
import json
import os
import sys
import unittest


class RecordingResult(unittest.TextTestResult):
    truth = []

    def _rec(self, test, outcome):
        self.truth.append({"id": test.id(), "str": str(test), "description": self.getDescription(test), "outcome": outcome})

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

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._rec(test, "FAILED")


def record():
    with open(os.environ["SWERL_TRUTH"], "w") as f:
        json.dump(RecordingResult.truth, f, indent=1)


if __name__ == "__main__":
    runner = unittest.TextTestRunner(resultclass=RecordingResult, verbosity=2)
    prog = unittest.main(module=None, argv=["python -m unittest", "-v"] + sys.argv[1:], testRunner=runner, exit=False)
    record()
    sys.exit(not prog.result.wasSuccessful())
