#!/usr/bin/env bash
# Agreement of our parsers and verdicts with the official swebench package on the recorded real logs.
set -euo pipefail
cd "$(dirname "$0")/.."
py="$(bash scripts/ensure-python.sh swebench)"
node --import tsx checks/testlogs/dump.ts | "$py" checks/swebench_agreement.py
