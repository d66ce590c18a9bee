"""Loads one run of a swerl evaluation with the official SWE-bench harness's own readers.

Reads RUN_DIR/predictions.jsonl with swebench's get_predictions_from_file, the tasks file with
load_swebench_dataset, and the instance reports under RUN_DIR/logs/run_evaluation/RUN_ID/ with
make_run_report (which reads every report.json the way the harness does). Prints the harness's run
summary as JSON on the last line, for the caller to compare with swerl's own.

Usage: python swebench_outputs.py RUN_DIR TASKS_JSONL RUN_ID OUT_DIR
"""
import contextlib
import io
import json
import os
import sys

from swebench.harness.reporting import make_run_report
from swebench.harness.utils import get_predictions_from_file, load_swebench_dataset


def main() -> None:
    run_dir, tasks_file, run_id, out_dir = sys.argv[1:5]
    tasks_file = os.path.abspath(tasks_file)
    out_dir = os.path.abspath(out_dir)
    os.chdir(run_dir)  # the harness resolves logs/run_evaluation/ against the working directory
    predictions = get_predictions_from_file("predictions.jsonl", tasks_file, "test")
    for p in predictions:
        for key in ("instance_id", "model_name_or_path", "model_patch"):
            if key not in p:
                raise SystemExit(f"prediction {p.get('instance_id')!r} has no {key}")
    dataset = load_swebench_dataset(tasks_file, "test")
    with contextlib.redirect_stdout(io.StringIO()):
        path = make_run_report({p["instance_id"]: p for p in predictions}, dataset, run_id, client=None, report_dir=out_dir)
    with open(path) as f:
        print(json.dumps(json.load(f)))


if __name__ == "__main__":
    main()
