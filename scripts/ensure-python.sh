#!/usr/bin/env bash
# Makes a project-local Python virtual environment for one group of PyPI packages and prints its
# python path: .tools/venv-<group>/bin/python, from scripts/python/<group>.txt (pinned versions).
# One venv per group, so PyTorch, MLflow and the SWE-bench harness never constrain each other's pins.
# Idempotent and fast when the installed requirements match (a stamp holds the file's hash).
# Directives in the requirements file:
#   # ensure-python: no-deps       the file is a complete lock: installed with --no-deps; its wheels are kept in
#                                  $SWERL_WHEEL_CACHE (default ~/.cache/swerl/wheels), so a fresh clone on the same
#                                  machine downloads nothing (the registry proxy here sends no cache headers, so
#                                  pip's own HTTP cache keeps nothing)
#   # ensure-python: post FILE.py  run with the venv's python after installing (its hash is in the stamp too)
# Usage: bash scripts/ensure-python.sh GROUP     (e.g. torch, mlflow, swebench)
set -euo pipefail
cd "$(dirname "$0")/.."
group="${1:?usage: ensure-python.sh GROUP}"
req="scripts/python/$group.txt"
[ -f "$req" ] || { echo "[ensure-python] no requirements file $req" >&2; exit 2; }
venv="$PWD/.tools/venv-$group"
post="$(sed -n 's/^# ensure-python: post //p' "$req")"
nodeps=0; grep -q '^# ensure-python: no-deps' "$req" && nodeps=1
want="$(cat "$req" ${post:+"$post"} | sha256sum | cut -c1-16)"
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.stamp" 2>/dev/null)" = "$want" ]; then
  echo "$venv/bin/python"; exit 0
fi
py="${SWERL_PYTHON:-python3}"
command -v "$py" >/dev/null 2>&1 || { echo "[ensure-python] $py not found: install Python 3.10+ or set SWERL_PYTHON" >&2; exit 1; }
echo "[ensure-python] $group: installing $req into $venv" >&2
t0=$(date +%s)
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv" >&2
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
if [ "$nodeps" = 1 ]; then
  cache="${SWERL_WHEEL_CACHE:-$HOME/.cache/swerl/wheels}"
  mkdir -p "$cache"
  offline=("${pip[@]}" install --quiet --no-deps --no-compile --no-index --find-links "$cache" -r "$req")
  if ! "${offline[@]}" 2>/dev/null; then  # some wheel is not cached yet: fetch what is missing
    "${pip[@]}" download --quiet --no-deps --only-binary=:all: -d "$cache" -r "$req" >&2
    "${offline[@]}" >&2
  fi
else
  "${pip[@]}" install --quiet -r "$req" >&2
fi
echo "[ensure-python] $group: packages installed after $(( $(date +%s) - t0 )) s" >&2
[ -z "$post" ] || "$venv/bin/python" "$post" >&2
echo "$want" > "$venv/.stamp"
echo "[ensure-python] $group ready in $(( $(date +%s) - t0 )) s" >&2
echo "$venv/bin/python"
