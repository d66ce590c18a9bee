#!/usr/bin/env bash
# Runs the test files under test/ with Node's built-in runner (TypeScript through tsx).
#
#   bash scripts/test.sh           the lint and format checks, the unit tier, then every other file
#   bash scripts/test.sh --unit    the unit tier only (npm run test:unit: pure logic, parsers, maths and
#                                  workflow code with stubbed activities; no Docker, under 2 minutes)
#
# Grouping is declared by each file, not listed here: its first line is `// test-group: NAME`, naming what
# the file contends for.
#   unit       nothing shared: pure code, or Temporal's TestWorkflowEnvironment. Run first, two at a time.
#   docker     the shared Docker engine (sandboxes, grading, task images): one such file at a time.
#   cpu-heavy  the CPU itself (the native engine's numerics, the CUDA emulator, torch, tsc, llama-server's model):
#              one at a time.
#   temporal   dev servers, worker processes and the other servers it starts on free ports (MLflow,
#              Prometheus, a browser): one at a time.
#   cluster    a Kubernetes cluster: one at a time, in the cpu-heavy lane once its files are done (the shortest of
#              the three; on a cold machine the cluster's build in the background is what it waits for).
# The docker, cpu-heavy and temporal lanes run side by side, each one file at a time. A file with no
# (or an unknown) group runs alone at the very end, so a new file is safe before it says what it needs.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.tools/bin:$PATH"

unit_only=0
[ "${1:-}" = --unit ] && unit_only=1

group_of() { sed -n '1s#^// test-group: *\([a-z-]*\).*#\1#p' "$1"; }

declare -A lane
for g in unit docker cpu-heavy temporal cluster exclusive; do lane[$g]=""; done
while IFS= read -r f; do
  g=$(group_of "$f")
  case "$g" in unit | docker | cpu-heavy | temporal | cluster) ;; *) g=exclusive ;; esac
  lane[$g]+="$f"$'\n'
done < <(find test -name '*.test.ts' | sort)

logs=$(mktemp -d "${TMPDIR:-/tmp}/swerl-test-XXXXXX")
trap 'rm -rf "$logs"' EXIT
failed=0

# runs the files of one group with `concurrency` at a time; spec output to the terminal (or to $logs/NAME.log
# when `quiet`), TAP to $logs/*.tap for the totals. One at a time, each file is its own run, so its wall time
# goes to $logs/times (printed at the end: what to look at when a lane grows).
run_group() {
  local name=$1 concurrency=$2 quiet=$3
  local -a files
  mapfile -t files < <(printf '%s' "${lane[$name]}" | sed '/^$/d')
  [ ${#files[@]} -eq 0 ] && return 0
  # the spec output: to the terminal, or appended to the lane's log
  out() { if [ "$quiet" = 1 ]; then "$@" >>"$logs/$name.log"; else "$@"; fi; }
  echo "[test] $name: ${#files[@]} file(s)" >&2
  if [ "$concurrency" -gt 1 ]; then
    out node --import tsx --test --test-concurrency="$concurrency" \
      --test-reporter=spec --test-reporter-destination=stdout \
      --test-reporter=tap --test-reporter-destination="$logs/$name.tap" "${files[@]}"
    return
  fi
  local f started rc=0
  for f in "${files[@]}"; do
    started=$SECONDS
    out node --import tsx --test \
      --test-reporter=spec --test-reporter-destination=stdout \
      --test-reporter=tap --test-reporter-destination="$logs/$name.$(basename "$f").tap" "$f" || rc=1
    printf '%5d s  %-9s %s\n' $((SECONDS - started)) "$name" "$f" >>"$logs/times"
  done
  return $rc
}

if [ "$unit_only" = 0 ]; then
  npm run --silent lint || failed=1
  npm run --silent format:check || failed=1
fi
run_group unit 2 0 || failed=1

if [ "$unit_only" = 0 ]; then
  pids=()
  run_group docker 1 1 &
  pids+=($!)
  (
    rc=0
    run_group cpu-heavy 1 1 || rc=1
    run_group cluster 1 1 || rc=1
    exit $rc
  ) &
  pids+=($!)
  run_group temporal 1 1 &
  pids+=($!)
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || failed=1; done
  for g in docker cpu-heavy temporal cluster; do [ -f "$logs/$g.log" ] && { echo "[test] ---- $g ----"; cat "$logs/$g.log"; }; done
  run_group exclusive 1 0 || failed=1
fi

if [ -f "$logs/times" ]; then
  echo "[test] wall time per file, longest first:"
  sort -rn "$logs/times" | head -20
fi
pass=0
fail=0
for t in "$logs"/*.tap; do
  [ -f "$t" ] || continue
  p=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$t" | tail -1)
  f=$(sed -n 's/^# fail \([0-9]*\)$/\1/p' "$t" | tail -1)
  pass=$((pass + ${p:-0}))
  fail=$((fail + ${f:-0}))
done
echo "$pass passed, $fail failed"
[ "$failed" = 0 ] && [ "$fail" = 0 ]
