#!/usr/bin/env bash
# Installs a GPU-free CUDA 13 compile toolchain (nvcc, cudart, CCCL, cuBLAS headers + libs) from PyPI
# into .tools/cuda (git-ignored), idempotently, and prints the nvcc path on stdout.
# Not part of `npm test` (the wheels are large); `npm run check:cuda` calls it.
# On a machine that already has nvcc on PATH (the H100 box), scripts/gpu-check.sh uses that instead.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.tools/cuda"
cu="$dest/nvidia/cu13"
nvcc="$cu/bin/nvcc"
stamp="$dest/.complete"
if [[ ! -f "$stamp" || ! -x "$nvcc" ]]; then
  echo "ensure-cuda-toolchain: installing nvidia-cuda-nvcc, -runtime, -cccl, -cublas (cu13) into $dest" >&2
  python3 -m pip install --quiet --disable-pip-version-check --upgrade --target "$dest" \
    nvidia-cuda-nvcc nvidia-cuda-runtime nvidia-cuda-cccl nvidia-cublas >&2 \
    || { echo "ensure-cuda-toolchain: pip install failed; check network access to PyPI and rerun" >&2; exit 1; }
  [[ -x "$nvcc" ]] || { echo "ensure-cuda-toolchain: $nvcc missing after install (wheel layout changed?)" >&2; exit 1; }
  # The wheels ship versioned shared objects only; the linker wants the unversioned names.
  for lib in cudart cublas cublasLt; do
    so="$(ls "$cu/lib/lib$lib.so."* 2>/dev/null | sort | head -1 || true)"
    [[ -n "$so" && ! -e "$cu/lib/lib$lib.so" ]] && ln -s "$(basename "$so")" "$cu/lib/lib$lib.so"
  done
  touch "$stamp"
fi
echo "$nvcc"
