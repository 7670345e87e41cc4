# Two commands for a fresh machine: `make demo` and `make test` (both set everything up first).
VENV   ?= .venv
ENGINE ?=
MODEL  ?=
PY     := $(VENV)/bin/python
export ROS_AUTOMATIC_DISCOVERY_RANGE ?= LOCALHOST
export ROS_LOG_DIR ?= $(CURDIR)/build/ros_log
export PYTHONUNBUFFERED := 1

.PHONY: setup demo test test-fast bench model adapt clean help

help:
	@echo "make demo   set up .venv, build the interfaces, run the demo fleet (2 arms + 3 drones) on SmolLM2-135M with its"
	@echo "           adapter (llama.cpp), draw build/demo/timeline.png; MODEL=embedded on the tiny embedded planner,"
	@echo "           ENGINE=transformers|vllm on another engine"
	@echo "make test   set up if needed, run the whole test suite"
	@echo "make bench regenerate docs/results.md (QUICK=1: the fast sections only; RERUN=name,...|all:"
	@echo "           also the long ones, read from docs/results/ otherwise; RENDER=1: rewrite it from stored runs)"
	@echo "make model  retrain the embedded default planner model (not needed: it is committed)"
	@echo "make adapt MODEL=smollm2 ROBOT=drone,arm  train a LoRA adapter of a model entry for robot types"
	@echo "           (SKILLS_DIR=a team's folder, OUT=adapter folder, MINUTES=time budget, DEVICE=cuda)"
	@echo "make colcon-test  colcon build + colcon test of the package against .venv (colcon in build/colcon_venv)"
	@echo "make stress reliability suite on loopback (STRESS_SOAK_S=60 for a short soak; SOAK_GOALS=50000 for the"
	@echo "                 long mode: memory over many mixed goals; docs/stress.md)"

setup:
	@tools/setup_venv.sh
	@VENV=$(VENV) tools/build_interfaces.sh
	@[ -f $(VENV)/.timely-editable ] || { $(PY) -m pip install -q --no-deps --no-build-isolation -e . \
	  --config-settings editable_mode=compat && touch $(VENV)/.timely-editable; }
	@$(PY) -m timely_llm_ros.engine.models prepare
	@$(PY) -c "import timely_llm_ros.action, timely_llm_ros.core.scheduler; print('[setup] timely_llm_ros ready')"

# The demo runs MODEL (default smollm2: SmolLM2-135M with its adapter, the entry with the best goal success on the
# evaluation's heldout split; docs/results.md "Plan quality"). The run writes the server's step trace and the
# workload's events into DEMO_OUT, and draws them as one picture (tools/demo_timeline.py). `make demo-image`
# copies that picture to docs/images/ for the README.
DEMO_OUT ?= build/demo
demo: setup
	@rm -f $(DEMO_OUT)/steps.csv $(DEMO_OUT)/events.csv $(DEMO_OUT)/timeline.png
	$(VENV)/bin/timely_bringup --fleet config/fleet/demo.yaml $(if $(ENGINE),--set timely_server.engine=$(ENGINE)) \
	  --set timely_server.model=$(or $(MODEL),smollm2) --set timely_server.step_trace_csv=$(abspath $(DEMO_OUT))/steps.csv \
	  --set fleet_workload.events_csv=$(abspath $(DEMO_OUT))/events.csv
	$(PY) -m tools.demo_timeline $(DEMO_OUT)

.PHONY: demo-image
demo-image: demo
	@mkdir -p docs/images && cp $(DEMO_OUT)/timeline.png docs/images/demo_timeline.png && \
	  echo "docs/images/demo_timeline.png updated"

# TEST_WORKERS=N: N pytest-xdist workers, one test file at a time each, every worker on a ROS domain of its own
# (test/conftest.py): 9-18 min at 2 on 2 cores, by CPU. Tests that measure memory do it in a fresh process of their own, so
# which files share a worker does not change them. TEST_WORKERS=0 runs the suite in one process (about twice as long).
TEST_WORKERS ?= 2
test: setup
	$(PY) -m pytest test -q -p no:cacheprovider $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)

# docs/results.md and its plots from the benchmark scripts (benchmarks/results.py; ROS sections use ROS_DOMAIN_ID).
QUICK  ?=
RERUN  ?=
RENDER ?=
bench: setup
	PYTHONPATH=$(CURDIR) $(PY) benchmarks/results.py $(if $(QUICK),--quick) $(if $(RERUN),--rerun $(RERUN)) \
	  $(if $(RENDER),--render-only)

model: setup
	$(PY) -m tools.embedded_planner.train --out models/default_planner

# A LoRA adapter of model entry MODEL for the robot types ROBOT (timely_llm_ros/adapt/train.py; docs/robots.md).
ROBOT      ?=
SKILLS_DIR ?=
OUT        ?=
MINUTES    ?=
DEVICE     ?=
adapt: setup
	@[ -n "$(ROBOT)" ] || { echo "make adapt: say which robot types, e.g. ROBOT=drone,arm"; exit 2; }
	PYTHONPATH=$(CURDIR) $(PY) -m timely_llm_ros.adapt.train --model $(or $(MODEL),smollm2) --robot $(ROBOT) $(if $(SKILLS_DIR),--skills-dir $(SKILLS_DIR)) \
	  $(if $(OUT),--out $(OUT)) $(if $(MINUTES),--minutes $(MINUTES)) $(if $(DEVICE),--device $(DEVICE))

clean:
	rm -rf build out .pytest_cache

# Reliability suite (tools/stress/run.py): real server + executors + clients on loopback; prints a table and
# exits non-zero on any lost goal, wrong error code, crash or leak. `make stress STRESS_SOAK_S=60` for a short soak.
# `make stress SOAK_GOALS=50000`: the long mode instead (memory over many mixed goals; table and plot in
# build/stress_soak/).
STRESS_SOAK_S ?= 600
SOAK_GOALS ?=
.PHONY: stress
stress: setup
	$(PY) tools/stress/run.py $(if $(SOAK_GOALS),--soak-goals $(SOAK_GOALS),--soak-s $(STRESS_SOAK_S))

# `colcon test` without a ROS install (tools/colcon_test.sh): colcon from PyPI into build/colcon_venv, the workspace in
# build/colcon_ws, the venv's ROS 2 wheels as the underlay. Prints `colcon test-result --all --verbose`, fails on any
# failed test. A subset: `make colcon-test PYTEST_ADDOPTS="-k lint"`.
.PHONY: colcon-test
colcon-test: setup
	@VENV=$(VENV) tools/colcon_test.sh
