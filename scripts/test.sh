#!/usr/bin/env bash
# Runs every test file under test/ with Node's built-in runner (TypeScript through tsx), one file at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.tools/bin:$PATH"
mapfile -t files < <(find test -name '*.test.ts' | sort)
exec node --import tsx --test --test-concurrency=1 --test-reporter=spec "${files[@]}"
