"""LRTrace workloads: the recorded traces, a Poisson generator with the paper's presets, YAML and bag I/O."""
from timely_llm_ros.evaluation.workload.generator import Workload, WorkloadSpec, WorkloadTask, generate, load_spec, preset
from timely_llm_ros.evaluation.workload.io import load_workload, save_workload
from timely_llm_ros.evaluation.workload.lrtrace import TRACES, Trace, get_trace

__all__ = ["TRACES", "Trace", "Workload", "WorkloadSpec", "WorkloadTask", "generate", "get_trace", "load_spec",
           "load_workload", "preset", "save_workload"]
