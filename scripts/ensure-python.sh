#!/usr/bin/env bash
# Makes a project-local Python virtual environment for one group of PyPI packages and prints its
# python path: .tools/venv-<group>/bin/python, from scripts/python/<group>.txt (pinned versions).
# One venv per group, so PyTorch, MLflow and the SWE-bench harness never constrain each other's pins.
# Idempotent and fast when the installed requirements match (a stamp holds the file's hash).
# Usage: bash scripts/ensure-python.sh GROUP     (e.g. torch, mlflow, swebench)
set -euo pipefail
cd "$(dirname "$0")/.."
group="${1:?usage: ensure-python.sh GROUP}"
req="scripts/python/$group.txt"
[ -f "$req" ] || { echo "[ensure-python] no requirements file $req" >&2; exit 2; }
venv="$PWD/.tools/venv-$group"
want="$(sha256sum "$req" | cut -c1-16)"
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.stamp" 2>/dev/null)" = "$want" ]; then
  echo "$venv/bin/python"; exit 0
fi
py="${SWERL_PYTHON:-python3}"
command -v "$py" >/dev/null 2>&1 || { echo "[ensure-python] $py not found: install Python 3.10+ or set SWERL_PYTHON" >&2; exit 1; }
echo "[ensure-python] $group: installing $req into $venv" >&2
t0=$(date +%s)
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" >&2
echo "$want" > "$venv/.stamp"
echo "[ensure-python] $group ready in $(( $(date +%s) - t0 )) s" >&2
echo "$venv/bin/python"
