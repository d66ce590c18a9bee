#!/usr/bin/env bash
# Runs the test files under test/ with Node's built-in runner (TypeScript through tsx).
#
#   bash scripts/test.sh           the lint and format checks, the unit tier, then every other file
#   bash scripts/test.sh --unit    the unit tier only (npm run test:unit: pure logic, parsers, maths and
#                                  workflow code with stubbed activities; no Docker, under 2 minutes)
#
# A file's tier is the folder it sits in, test/TIER/NAME.test.ts, naming what the file contends for.
#   unit       nothing shared: pure code, or Temporal's TestWorkflowEnvironment. Run first, two at a time.
#   docker     the Docker engine (sandboxes, grading, task images): one file at a time, two on more than 2 cores
#              (SWERL_TEST_DOCKER_SLOTS); a file that restarts an engine starts its own (test/helpers/private-dockerd.ts).
#   cpu-heavy  the CPU itself (the native engine's numerics, the CUDA emulator, torch, tsc, llama-server's model):
#              one at a time.
#   temporal   dev servers, worker processes and the other servers it starts on free ports (MLflow,
#              Prometheus, a browser): one at a time.
#   cluster    a Kubernetes cluster: one at a time, in the cpu-heavy lane once its files are done (on a cold
#              machine the cluster's build in the background is what it waits for).
# The docker, cpu-heavy and temporal lanes run side by side, each starting with its longest files. A test file
# outside these folders fails the run before anything starts. Any one file runs alone by name:
#   node --import tsx --test test/unit/grpo.test.ts
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.tools/bin:$PATH"

unit_only=0
# Docker files at a time: two where there are more than 2 cores. On 2 cores the three lanes already keep the CPU
# at 99% (measured: 37.9 CPU-minutes in 19.2 min), so a second slot only adds contention: 19 min 20 s against
# 19 min 33 s with one, and timing windows in the fault tests widen.
docker_slots=${SWERL_TEST_DOCKER_SLOTS:-$(($(nproc) > 2 ? 2 : 1))}
# the last full run's wall time per file (kept outside the clone, like the other caches): each lane starts with
# its longest files, and files it does not know first
times_cache="${XDG_CACHE_HOME:-$HOME/.cache}/swerl/test-times"
[ "${1:-}" = --unit ] && unit_only=1

declare -A lane
for g in unit docker cpu-heavy temporal cluster; do lane[$g]=""; done
stray=0
while IFS= read -r f; do
  g=${f#test/}
  g=${g%%/*}
  if [ -z "${lane[$g]+x}" ] || [ "$(dirname "$f")" != "test/$g" ]; then
    echo "[test] $f is not in a tier folder (test/{unit,docker,cpu-heavy,temporal,cluster}/): move it to the one naming what it contends for" >&2
    stray=1
    continue
  fi
  lane[$g]+="$f"$'\n'
done < <(find test -name '*.test.ts' | sort)
[ "$stray" = 0 ] || exit 1

logs=$(mktemp -d "${TMPDIR:-/tmp}/swerl-test-XXXXXX")
trap 'rm -rf "$logs"' EXIT
failed=0

# file names on stdin, printed longest first by $times_cache (unknown files first, in their order)
longest_first() {
  awk -v cache="$times_cache" 'BEGIN { while ((getline l < cache) > 0) { n = split(l, a, " "); t[a[n]] = a[1] } }
    { print (($0 in t) ? t[$0] : 1e9) "\t" NR "\t" $0 }' | sort -t$'\t' -k1,1nr -k2,2n | cut -f3-
}

# runs the files of group `name`. The unit files: one node --test run, `slots` files at a time, spec output to the
# terminal. The other groups: each file its own run, `slots` of them at a time (each slot takes the next file when
# its last one ends); spec output to the terminal, or with `quiet` to $logs/NAME/ to be printed in file order once
# the lanes are done; each file's wall time to $logs/times (printed at the end: what to look at when a lane grows).
# TAP to $logs/*.tap for the totals.
run_group() {
  local name=$1 slots=$2 quiet=$3
  local -a files
  mapfile -t files < <(printf '%s' "${lane[$name]}" | sed '/^$/d' | longest_first)
  [ ${#files[@]} -eq 0 ] && return 0
  echo "[test] $name: ${#files[@]} file(s), $slots at a time" >&2
  if [ "$name" = unit ]; then
    node --import tsx --test --test-concurrency="$slots" \
      --test-reporter=spec --test-reporter-destination=stdout \
      --test-reporter=tap --test-reporter-destination="$logs/$name.tap" "${files[@]}" ||
      { echo "the $name tier exited with status $?" >>"$logs/reasons"; return 1; }
    return
  fi
  mkdir -p "$logs/$name"
  echo 0 >"$logs/$name/next"
  slot() {
    local i f started rc=0
    while :; do
      i=$(flock "$logs/$name/next" bash -c 'i=$(cat "$1"); echo $((i + 1)) >"$1"; echo "$i"' _ "$logs/$name/next")
      [ "$i" -lt ${#files[@]} ] || break
      f=${files[$i]}
      started=$SECONDS
      local -a run=(node --import tsx --test --test-reporter=spec --test-reporter-destination=stdout
        --test-reporter=tap --test-reporter-destination="$logs/$name.$(basename "$f").tap" "$f")
      local code=0
      if [ "$quiet" = 1 ]; then "${run[@]}" >"$logs/$name/$(printf '%03d' "$i").log" || code=$?; else "${run[@]}" || code=$?; fi
      [ "$code" = 0 ] || { rc=1; echo "$f exited with status $code" >>"$logs/reasons"; }
      printf '%5d s  %-9s %s\n' $((SECONDS - started)) "$name" "$f" >>"$logs/times"
    done
    return $rc
  }
  local -a pids=()
  local k rc=0
  for ((k = 0; k < slots; k++)); do
    slot &
    pids+=($!)
  done
  for k in "${pids[@]}"; do wait "$k" || rc=1; done
  return $rc
}

if [ "$unit_only" = 0 ]; then
  npm run --silent lint || { failed=1; echo "npm run lint failed (its output is at the top)" >>"$logs/reasons"; }
  npm run --silent format:check ||
    { failed=1; echo "npm run format:check failed (npm run format fixes it; the files are at the top)" >>"$logs/reasons"; }
fi
run_group unit 2 0 || failed=1

if [ "$unit_only" = 0 ]; then
  pids=()
  run_group docker "$docker_slots" 1 &
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
  for g in docker cpu-heavy temporal cluster; do [ -d "$logs/$g" ] && { echo "[test] ---- $g ----"; cat "$logs/$g"/*.log; }; done
fi

if [ -f "$logs/times" ]; then
  echo "[test] wall time per file, longest first:"
  sort -rn "$logs/times" | head -20
  [ "$unit_only" = 0 ] && mkdir -p "$(dirname "$times_cache")" && cp "$logs/times" "$times_cache"
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
[ "$fail" = 0 ] || node scripts/tap-failures.mjs "$logs"/*.tap
echo "$pass passed, $fail failed"
# a run can fail with every test passing (lint, formatting, a file that crashed outside its tests): say what failed
[ -f "$logs/reasons" ] && { echo "[test] the run failed because:"; sed 's/^/  /' "$logs/reasons"; }
[ "$failed" = 0 ] && [ "$fail" = 0 ]
