"""Shared plumbing of the engine benchmarks and the profiler: model choice, timing, printing."""
from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path
from typing import Callable

import torch

from timely_llm_ros.engine.transformers.loader import LoadedModel, build_random_model, load_pretrained, random_config


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """--model / --random-config / --layers / --device / --dtype / --threads / --reps."""
    parser.add_argument("--model", default=None,
                        help="model folder or a name of config/models.yaml, e.g. smollm2 (default: "
                             "models/default_planner if present, else --random-config)")
    parser.add_argument("--random-config", default=None,
                        help="random weights of a named shape: tiny, small, llama3-8b, llama3-8b-8l ...")
    parser.add_argument("--layers", type=int, default=None, help="cut a random shape to this many layers")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--reps", type=int, default=7, help="repetitions; medians are reported")


def load_from_args(args: argparse.Namespace) -> LoadedModel:
    """The model the arguments name: a folder, a random shape, or the embedded default planner."""
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.random_config:
        return build_random_model(random_config(args.random_config, layers=args.layers), args.device, args.dtype)
    if args.model:
        return load_pretrained(model_folder(args.model), args.device, args.dtype)
    from timely_llm_ros.paths import default_model_dir

    if (default_model_dir() / "config.json").is_file():
        return load_pretrained(default_model_dir(), args.device, args.dtype)
    return build_random_model(random_config("small", layers=args.layers), args.device, args.dtype)


def model_folder(name_or_path: str) -> Path:
    """A model folder, or the prepared folder of an entry of config/models.yaml (``smollm2``); FileNotFoundError
    says how to prepare an entry that is not converted yet."""
    if Path(name_or_path).is_dir():
        return Path(name_or_path)
    from timely_llm_ros.core.models import model_spec
    from timely_llm_ros.engine.models import weights_folder

    return weights_folder(model_spec(name_or_path), convert=False)


def describe(loaded: LoadedModel) -> str:
    """Device, dtype, threads and model shape, printed with every result."""
    cfg = loaded.model.config
    dev = torch.cuda.get_device_name(loaded.device) if loaded.device.type == "cuda" else f"cpu x{torch.get_num_threads()} threads"
    return (f"device: {dev} | dtype: {str(loaded.dtype).replace('torch.', '')} | model: {loaded.source} "
            f"(layers={cfg.num_hidden_layers}, hidden={cfg.hidden_size}, heads={cfg.num_attention_heads}/"
            f"{getattr(cfg, 'num_key_value_heads', cfg.num_attention_heads)} kv, vocab={cfg.vocab_size})")


def random_prompt(loaded: LoadedModel, length: int, seed: int = 0) -> list[int]:
    """Token ids for timing (content does not matter; ids stay inside the vocabulary)."""
    rng = random.Random(seed)
    top = min(loaded.model.config.vocab_size, 256)
    return [rng.randrange(top) for _ in range(length)]


def endless(loaded: LoadedModel, length: int = 4096) -> list[int]:
    """forced_ids that keep a benchmark generation going (a real model would stop at its EOS)."""
    return random_prompt(loaded, length, seed=12345)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device) -> float:
    """Wall seconds of fn(), synchronised on cuda."""
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def ms(x: float) -> str:
    return f"{x * 1e3:8.2f} ms"


def generate_alone(engine, prompt: list[int], max_new_tokens: int, **add: object) -> tuple[str, int, float]:
    """One generation run alone to its end (``add``: the engine's add() options, e.g. grammar, forced_ids): its text
    without stop tokens, its token count and the seconds its steps took."""
    engine.add("alone", prompt, max_new_tokens, **add)
    ids, t0 = [], time.perf_counter()
    try:
        while True:
            step = engine.step(["alone"])
            ids.append(step.tokens["alone"])
            if "alone" in step.finished:
                break
        seconds = time.perf_counter() - t0
    finally:
        engine.release("alone")
    return engine.decode([i for i in ids if i != engine.eos_token_id]), len(ids), seconds
