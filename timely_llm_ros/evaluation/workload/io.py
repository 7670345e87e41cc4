"""Save and load workloads as YAML (spec, counts and every task), so runs can be replayed exactly."""
from __future__ import annotations

from dataclasses import MISSING, asdict, fields
from pathlib import Path

import yaml

from timely_llm_ros.evaluation.workload.generator import Workload, WorkloadSpec, WorkloadTask

_TASK_FIELDS = {f.name for f in fields(WorkloadTask)}
_REQUIRED = {f.name for f in fields(WorkloadTask) if f.default is MISSING}


def workload_to_dict(w: Workload) -> dict:
    return {"spec": w.spec.to_dict(), "events": w.events, "skipped": w.skipped,
            "tasks": [asdict(t) for t in w.tasks]}


def workload_from_dict(d: dict) -> Workload:
    tasks = []
    for i, t in enumerate(d.get("tasks") or []):
        missing = _REQUIRED - set(t)
        if missing:
            raise ValueError(f"workload task {i}: missing fields {sorted(missing)}")
        tasks.append(WorkloadTask(**{k: t[k] for k in _TASK_FIELDS if k in t}))
    tasks.sort(key=lambda t: t.arrival)
    return Workload(WorkloadSpec.from_dict(d["spec"]), tasks, int(d.get("skipped", 0)), int(d.get("events", 0)))


def save_workload(w: Workload, path: str | Path) -> Path:
    """Write w to a YAML file; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(workload_to_dict(w), f, sort_keys=False, allow_unicode=True)
    return path


def load_workload(path: str | Path) -> Workload:
    """Read a workload written by save_workload."""
    with open(path, encoding="utf-8") as f:
        return workload_from_dict(yaml.safe_load(f))
