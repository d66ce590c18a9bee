#!/usr/bin/env bash
# Makes a Python virtual environment for one group of PyPI packages and prints its python path:
# .tools/venv-<group>/bin/python, from scripts/python/<group>.txt (pinned versions).
# One venv per group, so PyTorch, MLflow and the SWE-bench harness never constrain each other's pins.
# The venv itself lives outside the clone, in $SWERL_VENV_CACHE (default ~/.cache/swerl/venvs/<group>-<hash>, the
# hash of the requirements and the post step), and .tools/venv-<group> links to it: a fresh clone of the same
# requirements on the same machine installs nothing (a venv cannot be moved, so it is built where it stays). A
# stamp written last marks a complete one; the two newest venvs of a group are kept.
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
link="$PWD/.tools/venv-$group"
post="$(sed -n 's/^# ensure-python: post //p' "$req")"
nodeps=0; grep -q '^# ensure-python: no-deps' "$req" && nodeps=1
want="$(cat "$req" ${post:+"$post"} | short_hash)"
store="${SWERL_VENV_CACHE:-$HOME/.cache/swerl/venvs}"
venv="$store/$group-$want"
# links .tools/venv-GROUP to the venv (replacing a venv an older set-up built inside the clone)
use_venv() {
  if [ "$(readlink "$link" 2>/dev/null)" != "$venv" ]; then
    mkdir -p "$(dirname "$link")"
    rm -rf "$link" && ln -s "$venv" "$link"
  fi
  echo "$link/bin/python"
}
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.stamp" 2>/dev/null)" = "$want" ]; then use_venv; exit 0; fi
py="${SWERL_PYTHON:-python3}"
command -v "$py" >/dev/null 2>&1 || { say "$py not found: install Python 3.10+ or set SWERL_PYTHON"; exit 1; }
mkdir -p "$store"
# one builder per venv: a second set-up (another clone) waits for the first, then finds the stamp
exec 9>"$venv.lock"
flock 9
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.stamp" 2>/dev/null)" = "$want" ]; then use_venv; exit 0; fi
say "$group: installing $req into $venv"
t0=$(date +%s)
rm -rf "$venv"
"$py" -m venv "$venv"
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
# older venvs of the group: keep the newest one besides this
for old in $(ls -dt "$store/$group"-???????????????? 2>/dev/null | grep -vx "$venv" | tail -n +2 || true); do rm -rf "$old" "$old.lock"; done
say "$group ready in $(since "$t0") s"
use_venv
