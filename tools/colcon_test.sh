#!/usr/bin/env bash
# `make colcon-test`: build and test timely_llm_ros with colcon against the project's venv (no ROS install).
# colcon comes from PyPI into its own venv (build/colcon_venv), so the project venv stays as `make setup` left it;
# the workspace (build, install, log, test results) is build/colcon_ws. The venv is the ament/CMake prefix: its
# ROS 2 wheels provide ament_cmake, rosidl and ament_cmake_pytest, and its Python runs the tests.
# Prints `colcon test-result --all --verbose`; exits non-zero when the build fails or any test failed.
# A subset: PYTEST_ADDOPTS="-k lint" tools/colcon_test.sh (pytest reads PYTEST_ADDOPTS).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=$(cd "${VENV:-.venv}" && pwd)
PY=${PYTHON:-python3}
CVENV="$ROOT/build/colcon_venv"
WS="$ROOT/build/colcon_ws"
# colcon-ros pulls colcon-cmake (+ library-path, pkg-config, python-setup-py, recursive-crawl); all pinned.
COLCON_PKGS=(colcon-core==0.21.3 colcon-cmake==0.2.30 colcon-ros==0.5.0 colcon-test-result==0.3.8
  colcon-library-path==0.2.1 colcon-pkg-config==0.1.0 colcon-python-setup-py==0.2.9
  colcon-recursive-crawl==0.2.3 catkin-pkg==1.1.1)
log() { echo "[colcon] $*"; }

[ -x "$VENV/bin/python" ] || { log "no venv at $VENV: run make setup first"; exit 1; }
stamp="$CVENV/.colcon-stamp"
want=$(printf '%s\n' "${COLCON_PKGS[@]}" | sha1sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  log "installing colcon into ${CVENV#"$ROOT"/} ..."
  [ -x "$CVENV/bin/python" ] || "$PY" -m venv "$CVENV"
  "$CVENV/bin/python" -m pip install -q "${COLCON_PKGS[@]}"
  echo "$want" > "$stamp"
fi
COLCON=("$CVENV/bin/colcon" --log-base "$WS/log")
# colcon builds a copy of the package in the workspace's src/ (the usual ws/src/<pkg> layout), not the checkout:
# CMake refuses an exported include path inside the source tree, and the checkout's .venv (numpy's headers, which
# the generated Python interfaces export) lies inside it. The copy holds what a clone holds (no .venv, build/, .git).
SRC="$WS/src/timely_llm_ros"
rm -rf "$SRC" && mkdir -p "$SRC"
tar -C "$ROOT" --exclude=./.venv --exclude=./build --exclude=./.git --exclude=./out --exclude=__pycache__ \
  --exclude=.hypothesis -cf - . | tar -C "$SRC" -xf -
WHERE=(--base-paths "$WS/src" --build-base "$WS/build" --install-base "$WS/install")

# The venv is the underlay a ROS install would be: CMake and ament find the ROS 2 wheels there, its python3
# and entry points come first on PATH. Same test environment as `make test`.
export CMAKE_PREFIX_PATH="$VENV${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export AMENT_PREFIX_PATH="$VENV${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}"
export PATH="$VENV/bin:$PATH"
export ROS_AUTOMATIC_DISCOVERY_RANGE=${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}
export ROS_LOG_DIR=${ROS_LOG_DIR:-$ROOT/build/ros_log}
export PYTHONUNBUFFERED=1

log "colcon build (workspace ${WS#"$ROOT"/}; the first build generates the interfaces: minutes) ..."
"${COLCON[@]}" build "${WHERE[@]}" --event-handlers console_direct- \
  --cmake-args -Wno-dev -DPython3_EXECUTABLE="$VENV/bin/python" -DPython3_FIND_VIRTUALENV=ONLY -DBUILD_TESTING=ON \
  || { tail -40 "$WS/log/latest_build/timely_llm_ros/stdout_stderr.log" 2>/dev/null
       log "build failed (full log: ${WS#"$ROOT"/}/log/latest_build/timely_llm_ros/stdout_stderr.log)"; exit 1; }

log "colcon test${PYTEST_ADDOPTS:+ (PYTEST_ADDOPTS=$PYTEST_ADDOPTS)} ..."
# Results old runs left would be counted again by test-result: start from none.
rm -rf "$WS/build/timely_llm_ros/test_results" "$WS/build/timely_llm_ros/Testing"
test_rc=0
"${COLCON[@]}" test "${WHERE[@]}" --event-handlers console_direct+ || test_rc=$?

log "colcon test-result --all --verbose"
result_rc=0
"${COLCON[@]}" test-result --test-result-base "$WS/build" --all --verbose || result_rc=$?
# One plain line for the suite alone (test-result's summary also counts the ctest entry that wraps it).
xml="$WS/build/timely_llm_ros/test_results/timely_llm_ros/timely_llm_ros_pytest.xunit.xml"
if [ -f "$xml" ]; then
  "$VENV/bin/python" - "$xml" <<'PYEOF'
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suite = root if root.tag == "testsuite" else root.find("testsuite")
tests, failures, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
print(f"timely_llm_ros_pytest: {tests - failures - errors - skipped} passed, {failures + errors} failed, {skipped} skipped")
PYEOF
else
  log "no pytest result file (${xml#"$ROOT"/})"; result_rc=1
fi
if [ "$test_rc" -ne 0 ] || [ "$result_rc" -ne 0 ]; then
  log "FAILED (colcon test exit $test_rc, test-result exit $result_rc)"; exit 1
fi
log "ok"
