"""Build an engine by kind name (the server's ``engine`` parameter)."""
from __future__ import annotations

from .base import Engine


def make_engine(kind: str, model_path: str | None = None, device: str = "auto", dtype: str = "auto",
                kv_budget_mb: float | None = None, **kw) -> Engine:
    """Create an engine.

    kind "transformers": model_path None/"" = the embedded default planner; ``random_config="tiny"``
    (or "small", "llama3-8b", "llama3-8b-8l") builds random weights of that shape instead (trace
    replay, benchmarks). Other keywords: temperature, top_p, seed (sampling; default greedy),
    num_threads (torch CPU threads), headroom_tokens (KV store growth step), batch_prefill (prefill a
    step's new generations together, default True), prefill_tokens (padded tokens per prefill forward),
    prefix_cache_mb (reuse the KV of prompt prefixes seen before, up to this many MiB; default off),
    prefix_min_tokens (shortest prefix worth reusing, default 32), step_token_budget (chunked prefill: tokens
    per step, decodes included; default off).
    """
    if kind != "transformers":
        raise ValueError(f"unknown engine kind {kind!r}; this factory knows: transformers")
    import torch

    from .loader import build_random_model, load_pretrained
    from .sampling import SamplingParams
    from .transformers_engine import TransformersEngine

    if kw.get("num_threads"):
        torch.set_num_threads(int(kw.pop("num_threads")))
    kw.pop("num_threads", None)
    sampling = SamplingParams(float(kw.pop("temperature", 0.0)), float(kw.pop("top_p", 1.0)), int(kw.pop("seed", 0)))
    random_config = kw.pop("random_config", None)
    if random_config:
        loaded = build_random_model(random_config, device, dtype, seed=sampling.seed)
    else:
        if not model_path:
            from ..paths import default_model_dir

            model_path = str(default_model_dir())
        loaded = load_pretrained(model_path, device, dtype)
    options = {k: kw.pop(k) for k in ("headroom_tokens", "batch_prefill", "prefill_tokens", "prefix_cache_mb",
                                      "prefix_min_tokens", "step_token_budget") if k in kw}
    if kw:
        raise ValueError(f"make_engine: unknown options {sorted(kw)}")
    return TransformersEngine(loaded, kv_budget_mb=kv_budget_mb, sampling=sampling, **options)
