# Truth for the recorded pytest logs: the categories pytest itself counted (terminalreporter.stats)
# per node id as -rA prints it, folded into one status (ERROR > FAILED > XPASS > XFAIL > SKIPPED > PASSED:
# a test that passed and then errored in teardown is an ERROR). Loaded with -p by
# checks/testlogs/record.ts; writes $SWERL_TRUTH.
import json
import os

ORDER = ["error", "failed", "xpassed", "xfailed", "skipped", "passed"]
STATUS = {"error": "ERROR", "failed": "FAILED", "xpassed": "XPASS", "xfailed": "XFAIL", "skipped": "SKIPPED", "passed": "PASSED"}


def pytest_terminal_summary(terminalreporter, config):
    cats = {}
    for cat, reports in terminalreporter.stats.items():
        if cat not in STATUS:
            continue
        for r in reports:
            nodeid = getattr(r, "nodeid", None)
            if nodeid and getattr(r, "when", None) is not None:
                cats.setdefault(config.cwd_relative_nodeid(nodeid), set()).add(cat)
    out = dict((k, STATUS[min(v, key=ORDER.index)]) for k, v in cats.items())
    with open(os.environ["SWERL_TRUTH"], "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
