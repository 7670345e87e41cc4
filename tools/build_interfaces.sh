#!/usr/bin/env bash
# Generate timely_llm_ros's msg/action interfaces into the venv (rosidl via cmake against the ROS 2 wheels).
# Idempotent: skips the build when msg/, action/, CMakeLists.txt and package.xml are unchanged.
# The Python sources are NOT copied: the venv imports them from this checkout (editable install / .pth);
# only timely_llm_ros/msg, timely_llm_ros/action and the type-support libraries land in site-packages.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=$(cd "${VENV:-.venv}" && pwd)
PY="$VENV/bin/python"
BUILD="$ROOT/build/interfaces"
log() { echo "[interfaces] $*"; }

[ -x "$PY" ] || { log "no venv at $VENV: run tools/setup_venv.sh first"; exit 1; }
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
GEN="$SITE/timely_llm_ros"
stamp="$VENV/.timely-interfaces-stamp"
want=$(cat msg/*.msg action/*.action CMakeLists.txt package.xml tools/build_interfaces.sh | sha1sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -f "$GEN/msg/__init__.py" ] && [ -f "$GEN/action/__init__.py" ]; then
  log "up to date ($GEN)"; exit 0
fi

# The wheels' exported *__rosidl_generator_pyExport.cmake files name the interpreter they were built with;
# point them at this venv's Python and numpy headers (rewrite is idempotent).
PY_INC=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
NP_INC=$("$PY" -c 'import numpy; print(numpy.get_include())')
fixed=0
for f in "$VENV"/share/*/cmake/*__rosidl_generator_pyExport*.cmake; do
  [ -f "$f" ] || continue
  if grep -q '/opt/python/cp311-cp311' "$f"; then
    sed -i -e "s#/opt/python/cp311-cp311/include/python3.11#$PY_INC#g" \
           -e "s#/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include#$NP_INC#g" "$f"
    fixed=$((fixed + 1))
  fi
done
log "patched $fixed exported python-generator cmake file(s) for $PY_INC"

mkdir -p "$BUILD"
log "configuring in ${BUILD#"$ROOT"/} ..."
export CMAKE_PREFIX_PATH="$VENV" AMENT_PREFIX_PATH="$VENV"
cmake -S "$ROOT" -B "$BUILD" -Wno-dev \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$VENV" \
  -DPython3_EXECUTABLE="$PY" \
  -DPython3_FIND_VIRTUALENV=ONLY \
  -DBUILD_TESTING=OFF \
  -DTIMELY_VENV_BUILD=ON > "$BUILD.configure.log" 2>&1 \
  || { tail -40 "$BUILD.configure.log"; log "configure failed (full log: $BUILD.configure.log)"; exit 1; }
log "building with $(nproc) job(s) ..."
cmake --build "$BUILD" -j "$(nproc)" > "$BUILD.build.log" 2>&1 \
  || { tail -40 "$BUILD.build.log"; log "build failed (full log: $BUILD.build.log)"; exit 1; }
log "installing into $VENV ..."
cmake --install "$BUILD" > "$BUILD.install.log" 2>&1 \
  || { tail -40 "$BUILD.install.log"; log "install failed (full log: $BUILD.install.log)"; exit 1; }

# rosidl writes an empty timely_llm_ros/__init__.py: as a regular package it would shadow the source tree.
# Without it the generated folder is a namespace portion that the source package's extend_path picks up.
rm -f "$GEN/__init__.py"
rm -rf "$GEN/__pycache__"
# ament_python_install_package inside rosidl also leaves an egg-info: pip would take it for an installed
# timely_llm_ros distribution and clash with the editable install of the checkout.
rm -rf "$SITE"/timely_llm_ros-*-py*.egg-info

# The generated modules and the source modules must import in one interpreter (checked from outside the
# checkout so that the current directory does not hide a missing install).
check='
import sys, timely_llm_ros, timely_llm_ros.msg, timely_llm_ros.action, timely_llm_ros.core.errors
from timely_llm_ros.action import Plan
assert timely_llm_ros.__file__ and timely_llm_ros.__file__.startswith(sys.argv[1]), timely_llm_ros.__file__
print("[interfaces] import check ok: sources", timely_llm_ros.__file__, "| generated", timely_llm_ros.msg.__file__)
'
if (cd / && "$PY" -c 'import timely_llm_ros, sys; sys.exit(0 if timely_llm_ros.__file__ else 1)') 2>/dev/null; then
  (cd / && "$PY" -c "$check" "$ROOT") || { log "import check failed"; exit 1; }
else
  log "note: the checkout is not installed in the venv yet (pip install -e .); checking with PYTHONPATH=$ROOT"
  (cd / && PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c "$check" "$ROOT") || { log "import check failed"; exit 1; }
fi
echo "$want" > "$stamp"
log "done"
