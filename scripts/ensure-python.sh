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
tag=ensure-python; . scripts/lib.sh
group="${1:?usage: ensure-python.sh GROUP}"
req="scripts/python/$group.txt"
[ -f "$req" ] || { say "no requirements file $req"; exit 2; }
venv="$PWD/.tools/venv-$group"
post="$(sed -n 's/^# ensure-python: post //p' "$req")"
nodeps=0; grep -q '^# ensure-python: no-deps' "$req" && nodeps=1
want="$(cat "$req" ${post:+"$post"} | short_hash)"
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.stamp" 2>/dev/null)" = "$want" ]; then
  echo "$venv/bin/python"; exit 0
fi
py="${SWERL_PYTHON:-python3}"
command -v "$py" >/dev/null 2>&1 || { say "$py not found: install Python 3.10+ or set SWERL_PYTHON"; exit 1; }
say "$group: installing $req into $venv"
t0=$(date +%s)
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
if [ "$nodeps" = 1 ]; then
  cache="${SWERL_WHEEL_CACHE:-$HOME/.cache/swerl/wheels}"
  mkdir -p "$cache"
  offline=("${pip[@]}" install --quiet --no-deps --no-compile --no-index --find-links "$cache" -r "$req")
  if ! "${offline[@]}" 2>/dev/null; then  # some wheel is not cached yet: fetch what is missing
    "${pip[@]}" download --quiet --no-deps --only-binary=:all: -d "$cache" -r "$req"
    "${offline[@]}"
  fi
else
  "${pip[@]}" install --quiet -r "$req"
fi
say "$group: packages installed after $(since "$t0") s"
[ -z "$post" ] || "$venv/bin/python" "$post"
echo "$want" > "$venv/.stamp"
say "$group ready in $(since "$t0") s"
echo "$venv/bin/python"
