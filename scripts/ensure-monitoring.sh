#!/usr/bin/env bash
# What the monitoring tests need (test/mlflow.test.ts, test/prometheus.test.ts, test/run-progress.test.ts):
# Debian's prometheus (a real server scraping a worker), chromium (headless screenshots of the Temporal
# UI, driven by playwright-core; never a downloaded browser) and DejaVu fonts (plot text), installed only
# when missing; and the MLflow tracking server in its own venv (scripts/python/mlflow.txt). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "[ensure-monitoring] $*" >&2; }

missing=()
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then say "need root to install ${missing[*]} (apt-get)"; exit 1; fi
  t0=$(date +%s)
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  say "installed in $(( $(date +%s) - t0 )) s"
fi
bash scripts/ensure-python.sh mlflow >/dev/null
