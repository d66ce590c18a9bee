#!/usr/bin/env bash
# CUDA backend checks for a machine with an NVIDIA GPU and nvcc (no Node needed). Writes everything to $OUT.
#   bash scripts/gpu-check.sh [all|build|compare|torch|bench]     (default all)
# build:   CMake + nvcc, -DGL_CUDA=ON, into gpu-learner/build-gpu
# compare: gpu_driver compare on tiny random checkpoints (CUDA vs the CPU reference; tolerances in gpu_driver.cpp)
# torch:   gpu-learner/tools/check_torch.py (transformers Qwen3ForCausalLM + autograd vs both backends)
# bench:   gpu_driver bench (qwen3-0.6b, seq 4096,16384,32768) + tools/bench_torch.py, results JSON in $OUT/bench.json
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$root/tmp/gpu-check}"
mkdir -p "$OUT"
stage="${1:-all}"
build="$root/gpu-learner/build-gpu"
drv="$build/gpu_driver"
status=0
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }

do_build() {
  command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
  command -v nvcc >/dev/null || { log "build: nvcc not found (PATH or /usr/local/cuda/bin)"; return 1; }
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  # the CPU reference's GEMMs through OpenBLAS where the box has libopenblas-dev, else the engine's own kernels
  blas=OFF; pkg-config --exists openblas 2>/dev/null && blas=ON
  cmake "${gen[@]}" -S "$root/gpu-learner" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGL_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGL_BLAS=$blas > "$OUT/build.log" 2>&1 \
    && cmake --build "$build" --parallel 16 >> "$OUT/build.log" 2>&1
  local rc=$?
  log "build rc=$rc ($(nvcc --version | tail -1))"
  return $rc
}

do_compare() {
  local rc=0 d="$OUT/tiny"
  # name: gpu_driver tiny options. Covers GQA groups, head_dim 32/64/128, tied/untied head, attention bias.
  local -a cfgs=(
    "gqa2-d32|--heads 4 --kv 2 --head-dim 32"
    "mha-d64-tied|--heads 2 --kv 2 --head-dim 64 --tied 1"
    "gqa4-d128-bias|--heads 4 --kv 1 --head-dim 128 --bias 1 --layers 3"
  )
  for c in "${cfgs[@]}"; do
    local name="${c%%|*}" opts="${c#*|}"
    "$drv" tiny "$d/$name" $opts --seed 7 && "$drv" compare "$d/$name" --steps 10 --json "$OUT/compare-$name.json" > "$OUT/compare-$name.txt" 2>&1
    local r=$?; [[ $r -ne 0 ]] && rc=1
    log "compare $name rc=$r ($(tail -1 "$OUT/compare-$name.txt"))"
  done
  return $rc
}

do_torch() {
  python3 "$root/gpu-learner/tools/check_torch.py" --driver "$drv" --out "$OUT/torch" > "$OUT/torch.txt" 2>&1
  local rc=$?
  log "torch check rc=$rc ($(tail -1 "$OUT/torch.txt"))"
  return $rc
}

do_bench() {
  "$drv" bench --device cuda --shape qwen3-0.6b --seq 4096,16384,32768 --dir "$OUT/ckpt-0.6b" --json "$OUT/bench-gl.json" > "$OUT/bench-gl.txt" 2>&1
  local r1=$?
  python3 "$root/gpu-learner/tools/bench_torch.py" --shape qwen3-0.6b --seq 4096,16384,32768 --json "$OUT/bench-torch.json" > "$OUT/bench-torch.txt" 2>&1
  local r2=$?
  rm -rf "$OUT/ckpt-0.6b"  # 2.4 GB of random weights: not worth bringing back
  python3 - "$OUT" "$root" <<'PY'
import json, subprocess, sys, datetime, os
out, root = sys.argv[1], sys.argv[2]
def load(p):
    try: return json.load(open(p))
    except Exception as e: return {"error": str(e)}
gl, pt = load(f"{out}/bench-gl.json"), load(f"{out}/bench-torch.json")
try: commit = subprocess.check_output(["git", "-C", root, "rev-parse", "HEAD"], text=True).strip()
except Exception: commit = os.environ.get("GL_COMMIT", "unknown")
try: dev = subprocess.check_output(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], text=True).strip()
except Exception: dev = "unknown"
ratios = {}
for r in gl.get("runs", []):
    t = next((x for x in pt.get("runs", []) if x.get("seq") == r["seq"] and x.get("tokens_per_s")), None)
    if t: ratios[str(r["seq"])] = r["tokens_per_s"] / t["tokens_per_s"]
res = {"device": dev, "date": datetime.datetime.utcnow().isoformat() + "Z", "commit": commit, "shape": gl.get("shape"),
       "gpu_learner": gl, "torch_eager": pt, "speedup_vs_torch": ratios}
json.dump(res, open(f"{out}/bench.json", "w"), indent=2)
print("speedup vs torch eager (tokens/s ratio):", ratios)
PY
  log "bench rc=$r1 torch rc=$r2 ($(tail -1 "$OUT/bench-gl.txt"))"
  [[ $r1 -eq 0 ]]
}

case "$stage" in
  build) do_build || status=1 ;;
  compare) do_compare || status=1 ;;
  torch) do_torch || status=1 ;;
  bench) do_bench || status=1 ;;
  all)
    do_build || { cat "$OUT/build.log" | tail -40; exit 1; }
    do_compare || status=1
    do_torch || status=1
    do_bench || status=1
    ;;
  *) echo "usage: $0 [all|build|compare|torch|bench]" >&2; exit 2 ;;
esac
cat "$OUT/summary.txt"
exit $status
