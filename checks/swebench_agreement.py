"""Agreement of our log parsers and verdicts with the official SWE-bench harness (PyPI `swebench`).

Runs swebench's own parsers (parse_log_pytest, parse_log_django, parse_log_sympy) and grading
functions (test_passed / test_failed / test_maintained, get_eval_tests_report, get_resolution_status)
over the real logs of test/fixtures/testlogs/, next to ours (checks/testlogs/dump.ts), and prints:
  - test ids: for every test the run reported, whether each side parsed it with the status it ran with;
  - verdicts: for every test as FAIL_TO_PASS and as PASS_TO_PASS, whether each side's verdict matches
    the verdict of the test's real status under that side's rules;
  - the repository's SWE tasks: resolved or not, without the fix and with the gold patch;
and lists every disagreement with the side that is right (the one that matches the run's truth).
Rule differences (the same real status judged by each rule set, e.g. XFAIL as FAIL_TO_PASS) are listed apart.

    bash checks/swebench-agreement.sh      (makes .tools/venv-swebench from scripts/python/swebench.txt)
"""
import json
import sys

import swebench
from swebench.harness.grading import get_eval_tests_report, get_resolution_status, test_failed, test_passed

try:
    from swebench.harness.grading import test_maintained
except ImportError:  # swebench < 5: PASS_TO_PASS success is test_passed, a skipped test is neither
    test_maintained = test_passed
from swebench.harness.log_parsers.python import parse_log_django, parse_log_pytest, parse_log_sympy

PARSER = {"pytest": parse_log_pytest, "unittest": parse_log_django, "django": parse_log_django, "sympy": parse_log_sympy}
FIXTURES = "test/fixtures/testlogs/"


def swe_f2p(case, sm):
    # SWE-bench 5: success iff passed (PASSED or XFAIL); failure iff failed (missing, FAILED, ERROR, SKIPPED; 4.x: not SKIPPED)
    return "success" if test_passed(case, sm) else "failure" if test_failed(case, sm) else "neither"


def swe_p2p(case, sm):
    return "success" if test_maintained(case, sm) else "failure" if test_failed(case, sm) else "neither"


def our_f2p(s):
    return "success" if s == "PASSED" else "failure"


def our_p2p(s):
    return "success" if s in ("PASSED", "XFAIL", "SKIPPED") else "failure"


def swe_status(s):
    # what SWE-bench's status map would hold for a test that really ran with status s (XPASS is not a SWE-bench status)
    return None if s == "XPASS" else s


def main():
    data = json.load(sys.stdin)
    print("swebench %s parsers and grading vs ours on %d real logs\n" % (swebench.__version__, len(data)))
    totals = {"ids": 0, "swe_ids": 0, "our_ids": 0, "verdicts": 0, "swe_verdicts": 0, "our_verdicts": 0}
    disagreements = []
    rule_differences = []
    for name, rec in sorted(data.items()):
        log = open(FIXTURES + name + ".log", encoding="utf-8").read()
        swe = PARSER[rec["format"]](log, None)
        ours = rec["ours"]
        n = swe_ok = our_ok = 0
        v_n = v_swe = v_our = 0
        for case, status in sorted(rec["truth"].items()):
            n += 1
            s_ok = swe.get(case) == status or (status == "XPASS" and case not in swe)
            o_ok = ours.get(case) == status
            swe_ok += s_ok
            our_ok += o_ok
            if s_ok != o_ok or not s_ok:
                disagreements.append(
                    "%s: id %r ran %s; swebench parsed %s, ours %s -> right: %s"
                    % (name, case, status, swe.get(case, "MISSING"), ours.get(case, "MISSING"), "ours" if o_ok and not s_ok else "swebench" if s_ok and not o_ok else "neither")
                )
            truth_sm = {case: swe_status(status)} if swe_status(status) else {}
            for role, swe_fn, our_fn in (("FAIL_TO_PASS", swe_f2p, our_f2p), ("PASS_TO_PASS", swe_p2p, our_p2p)):
                v_n += 1
                swe_v, our_v = swe_fn(case, swe), our_fn(ours.get(case, "MISSING"))
                swe_right = swe_v == swe_fn(case, truth_sm)
                our_right = our_v == our_fn(status)
                v_swe += swe_right
                v_our += our_right
                if swe_fn(case, truth_sm) != our_fn(status):
                    rule_differences.append("%s: %s %r ran %s: swebench rules say %s, ours %s" % (name, role, case, status, swe_fn(case, truth_sm), our_fn(status)))
                if not (swe_right and our_right):
                    disagreements.append(
                        "%s: %s verdict for %r (ran %s): swebench %s, ours %s -> right: %s"
                        % (name, role, case, status, swe_v, our_v, "ours" if our_right else "swebench" if swe_right else "neither")
                    )
        line = "%-52s ids %2d/%2d swebench, %2d/%2d ours; verdicts %3d/%3d swebench, %3d/%3d ours" % (name, swe_ok, n, our_ok, n, v_swe, v_n, v_our, v_n)
        task = rec.get("task")
        if task:
            report = get_eval_tests_report(swe, {"instance_id": task["instance_id"], "FAIL_TO_PASS": task["FAIL_TO_PASS"], "PASS_TO_PASS": task["PASS_TO_PASS"]})
            swe_resolved = get_resolution_status(report) == "RESOLVED_FULL"
            line += "; resolved: expected %s, swebench %s, ours %s" % (task["expect_resolved"], swe_resolved, task["ours_resolved"])
            if swe_resolved != task["expect_resolved"] or task["ours_resolved"] != task["expect_resolved"]:
                disagreements.append("%s: task verdict expected %s, swebench %s, ours %s" % (name, task["expect_resolved"], swe_resolved, task["ours_resolved"]))
        print(line)
        totals["ids"] += n
        totals["swe_ids"] += swe_ok
        totals["our_ids"] += our_ok
        totals["verdicts"] += v_n
        totals["swe_verdicts"] += v_swe
        totals["our_verdicts"] += v_our
    t = totals
    print("\nTOTAL test ids right: swebench %d/%d (%.1f%%), ours %d/%d (%.1f%%)" % (t["swe_ids"], t["ids"], 100.0 * t["swe_ids"] / t["ids"], t["our_ids"], t["ids"], 100.0 * t["our_ids"] / t["ids"]))
    print("TOTAL verdicts right: swebench %d/%d (%.1f%%), ours %d/%d (%.1f%%)" % (t["swe_verdicts"], t["verdicts"], 100.0 * t["swe_verdicts"] / t["verdicts"], t["our_verdicts"], t["verdicts"], 100.0 * t["our_verdicts"] / t["verdicts"]))
    print("\nDisagreements with the run's truth (%d):" % len(disagreements))
    for d in disagreements:
        print("  " + d)
    print("\nRule differences, intended (the same real status judged by the two rule sets; ours: FAIL_TO_PASS needs PASSED) (%d):" % len(rule_differences))
    for d in rule_differences:
        print("  " + d)


if __name__ == "__main__":
    main()
