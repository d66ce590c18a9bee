#!/usr/bin/env bash
# Agreement of our parsers and verdicts with the official swebench package (5.0.2, the venv pinned in
# scripts/python/swebench.txt, and 4.0.4, installed beside it without dependencies) on the recorded real logs.
set -euo pipefail
cd "$(dirname "$0")/.."
py="$(bash scripts/ensure-python.sh swebench)"
old=".tools/swebench-4.0.4"
[ -f "$old/swebench/__init__.py" ] || "$py" -m pip install --quiet --disable-pip-version-check --no-deps --target "$old" swebench==4.0.4 >&2
data="$(mktemp)"; trap 'rm -f "$data"' EXIT
node --import tsx checks/testlogs/dump.ts > "$data"
"$py" checks/swebench_agreement.py < "$data"
echo
PYTHONPATH="$PWD/$old" "$py" checks/swebench_agreement.py < "$data"
