#!/usr/bin/env bash
# What the monitoring tests (test/temporal/mlflow.test.ts, test/temporal/prometheus.test.ts, test/temporal/run-progress.test.ts) and the
# README's "Watching a run" commands need:
# Debian's prometheus (a real server scraping a worker), chromium (headless screenshots of the Temporal
# UI, driven by playwright-core; never a downloaded browser) and DejaVu fonts (plot text), installed only
# when missing; and the MLflow tracking server in its own venv (scripts/python/mlflow.txt). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=ensure-monitoring; . scripts/lib.sh

missing=()
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
apt_install "${missing[@]}"
py="$(bash scripts/ensure-python.sh mlflow)"
# the lock installs without byte-compiling: import what `mlflow server` loads once, so its .pyc files are
# written now and not at each test's first server start (over a minute on a busy 2-core machine)
venv="$(dirname "$(dirname "$py")")"
if [ ! -f "$venv/.warm" ] || [ "$venv/.stamp" -nt "$venv/.warm" ]; then
  t0=$(date +%s)
  "$py" -W ignore -c 'import mlflow.cli, mlflow.server, mlflow.server.fastapi_app, mlflow.server.handlers, mlflow.store.tracking.sqlalchemy_store, mlflow.store.db.utils' >&2
  touch "$venv/.warm"
  say "mlflow server modules compiled in $(since "$t0") s"
fi
