#!/usr/bin/env bash
# Installs a GPU-free CUDA 13 compile toolchain from PyPI into .tools/cuda (git-ignored), idempotently, and prints
# the nvcc path on stdout.
#   ensure-cuda-toolchain.sh              nvcc, cudart, CCCL and cuBLAS (headers + libs, ~1.1 GB): the full build
#                                         (`npm run check:cuda`); not part of `npm test`
#   ensure-cuda-toolchain.sh --compiler   nvcc, cudart headers and CCCL only (~55 MB): enough to compile the kernels
#                                         for their register/spill report (scripts/cuda-kernel-report.ts, in CI)
# On a machine that already has nvcc on PATH (the H100 box), scripts/gpu-check.sh uses that instead.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.tools/cuda"
cu="$dest/nvidia/cu13"
nvcc="$cu/bin/nvcc"
pkgs=(nvidia-cuda-nvcc nvidia-cuda-runtime nvidia-cuda-cccl nvidia-cublas)
stamp="$dest/.complete"
if [[ "${1:-}" == "--compiler" ]]; then
  # pinned: register and spill counts depend on the compiler (gpu-learner/src/cuda/kernel-resources.json records them)
  pkgs=(nvidia-cuda-nvcc==13.5.37 nvidia-cuda-runtime==13.5.37 nvidia-cuda-cccl==13.3.5.0.6)
  [[ -f "$stamp" && -x "$nvcc" ]] && { echo "$nvcc"; exit 0; }  # the full toolchain has the compiler too
  stamp="$dest/.complete-compiler"
fi
if [[ ! -f "$stamp" || ! -x "$nvcc" ]]; then
  echo "ensure-cuda-toolchain: installing ${pkgs[*]} (cu13) into $dest" >&2
  python3 -m pip install --quiet --disable-pip-version-check --upgrade --target "$dest" "${pkgs[@]}" >&2 \
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
