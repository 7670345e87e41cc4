"""Build an engine by kind name (the server's ``engine`` parameter)."""
from __future__ import annotations

from timely_llm_ros.core.engine import Engine
from timely_llm_ros.core.models import ENGINE_KINDS


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
    per step, decodes included; default off), kv_store_rows and kv_store_tokens (a KV store of at least this
    many rows x token columns, made with the first generation and kept when idle, so its pages stay mapped;
    default 0, grown on demand and given back when idle).

    kind "vllm": vLLM's engine in-process (engine/vllm/engine.py) on a model folder (None = the embedded
    planner). kv_budget_mb sizes vLLM's KV pool (None = 256 MiB); dtype auto = float32 on CPU, bfloat16 on
    CUDA (never vLLM's own "auto"). adapter: vLLM serves a folder with it merged, written once (adapt/adapter.py). Options: vllm_block_size (default 32), vllm_tensor_parallel_size,
    vllm_pipeline_parallel_size, vllm_max_num_seqs, vllm_distributed_executor_backend, vllm_max_model_len,
    vllm_compile (True: vLLM compiles the model, CUDA graphs on a GPU; default eager), plus temperature, top_p,
    seed, num_threads. vllm_* options are ignored by the transformers engine, so a server passes them whatever its
    engine.

    kind "llamacpp": llama.cpp (engine/llamacpp/engine.py) on a GGUF file (model_path), its weights as stored.
    kv_budget_mb sizes its KV pool (None = 16 sequences); prefix_cache_mb, prefix_min_tokens, step_token_budget,
    temperature, top_p, seed and num_threads (llama.cpp's CPU threads) as above. Options: llamacpp_context_tokens
    (KV cells of each sequence: the longest prompt + output; default 2560; the pool holds kv_budget_mb of them),
    llamacpp_flash_attention ("on" (default) | "off" | "auto": llama.cpp decides),
    llamacpp_interrupt_poll_s (how often interrupt_check is asked while a decode runs, default 0.002),
    llamacpp_gpu_layers (layers offloaded to a GPU build's device, default 0), llamacpp_model_cache_dir (where the
    tokenizer built from the GGUF is kept: paths.model_cache_dir). adapter: a peft LoRA adapter folder, written once
    as a llama.cpp LoRA GGUF into the model cache (adapt/lora_gguf.py) and applied on every step; check it against
    the base first (stack.weights_location does). llamacpp_* options are ignored by the other engines, and theirs
    by it.
    """
    vllm_kw = {k: kw.pop(k) for k in list(kw) if k.startswith("vllm_")}
    llamacpp_kw = {k: kw.pop(k) for k in list(kw) if k.startswith("llamacpp_")}
    if kind == "vllm":
        return _make_vllm(model_path, device, dtype, kv_budget_mb, vllm_kw, kw)
    if kind == "llamacpp":
        return _make_llamacpp(model_path, kv_budget_mb, llamacpp_kw, kw)
    if kind != "transformers":
        raise ValueError(f"unknown engine kind {kind!r}; this factory knows: {', '.join(ENGINE_KINDS)}")
    import torch

    from timely_llm_ros.engine.transformers.loader import build_random_model, load_pretrained
    from timely_llm_ros.engine.transformers.sampling import SamplingParams
    from timely_llm_ros.engine.transformers.engine import TransformersEngine

    if kw.get("num_threads"):
        torch.set_num_threads(int(kw.pop("num_threads")))
    kw.pop("num_threads", None)
    sampling = SamplingParams(float(kw.pop("temperature", 0.0)), float(kw.pop("top_p", 1.0)), int(kw.pop("seed", 0)))
    random_config = kw.pop("random_config", None)
    adapter = kw.pop("adapter", None)
    if random_config:
        if adapter:
            raise ValueError("make_engine: an adapter needs the model folder it was trained on, not random weights")
        loaded = build_random_model(random_config, device, dtype, seed=sampling.seed)
    else:
        if not model_path:
            from timely_llm_ros.paths import default_model_dir

            model_path = str(default_model_dir())
        loaded = load_pretrained(model_path, device, dtype, adapter=adapter)
    options = {k: kw.pop(k) for k in ("headroom_tokens", "batch_prefill", "prefill_tokens", "prefix_cache_mb",
                                      "prefix_min_tokens", "step_token_budget", "kv_store_rows", "kv_store_tokens")
               if k in kw}
    if kw:
        raise ValueError(f"make_engine: unknown options {sorted(kw)}")
    return TransformersEngine(loaded, kv_budget_mb=kv_budget_mb, sampling=sampling, **options)


def _make_vllm(model_path: str | None, device: str, dtype: str, kv_budget_mb: float | None,
               vllm_kw: dict, kw: dict) -> Engine:
    from timely_llm_ros.engine.vllm.engine import VllmEngine, VllmOptions, kv_bytes_from_mb

    if kw.pop("random_config", None):
        raise ValueError("engine vllm needs a model folder (model_path); random_config is transformers-only")
    if not model_path:
        from timely_llm_ros.paths import default_model_dir

        model_path = str(default_model_dir())
    adapter = kw.pop("adapter", None)
    if adapter:
        from timely_llm_ros.adapt.adapter import merged_folder
        from timely_llm_ros.engine.models import cache_root

        model_path = str(merged_folder(model_path, adapter, cache_root()))
    if dtype in ("", "auto", None):
        import torch

        dtype = "bfloat16" if device != "cpu" and torch.cuda.is_available() else "float32"
    names = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
    opts = VllmOptions(kv_bytes=kv_bytes_from_mb(kv_budget_mb), dtype=names.get(dtype, dtype))
    opts.enforce_eager = not bool(vllm_kw.pop("vllm_compile", False))
    for key, value in vllm_kw.items():
        name = key[len("vllm_"):]
        if name == "max_model_len":
            continue
        if not hasattr(opts, name):
            raise ValueError(f"make_engine: unknown vLLM option {key!r}")
        if value not in (None, "", 0):      # unset server parameters keep VllmOptions' defaults
            current = getattr(opts, name)
            setattr(opts, name, value if current is None else type(current)(value))
    engine_kw = {k: kw.pop(k) for k in ("temperature", "top_p", "seed", "num_threads") if k in kw}
    for ignored in ("headroom_tokens", "batch_prefill", "prefill_tokens", "prefix_cache_mb", "prefix_min_tokens",
                    "kv_store_rows", "kv_store_tokens"):
        kw.pop(ignored, None)          # transformers-engine tunables: vLLM has its own equivalents (kv_budget_mb)
    if kw:
        raise ValueError(f"make_engine: unknown options {sorted(kw)}")
    return VllmEngine(model_path, opts, max_model_len=vllm_kw.get("vllm_max_model_len") or None,
                      temperature=float(engine_kw.get("temperature", 0.0)), top_p=float(engine_kw.get("top_p", 1.0)),
                      seed=int(engine_kw.get("seed", 0)), num_threads=engine_kw.get("num_threads"))


_TRANSFORMERS_TUNABLES = ("headroom_tokens", "batch_prefill", "prefill_tokens", "kv_store_rows", "kv_store_tokens")


def _make_llamacpp(model_path: str | None, kv_budget_mb: float | None, llamacpp_kw: dict, kw: dict) -> Engine:
    from pathlib import Path

    from timely_llm_ros.engine.llamacpp.engine import LlamaCppEngine
    from timely_llm_ros.engine.transformers.sampling import SamplingParams

    if kw.pop("random_config", None):
        raise ValueError("engine llamacpp needs a GGUF file (model_path); random_config is transformers-only")
    if not model_path or not str(model_path).endswith(".gguf") or Path(model_path).is_dir():
        raise ValueError(f"engine llamacpp serves GGUF files; {model_path or 'the embedded planner'!r} is not one: "
                         "use engine transformers or vllm for a model folder")
    for ignored in _TRANSFORMERS_TUNABLES:
        kw.pop(ignored, None)          # transformers-engine tunables: llama.cpp sizes its own pool (kv_budget_mb)
    sampling = SamplingParams(float(kw.pop("temperature", 0.0)), float(kw.pop("top_p", 1.0)), int(kw.pop("seed", 0)))
    options = {k: kw.pop(k) for k in ("num_threads", "prefix_cache_mb", "prefix_min_tokens", "step_token_budget")
               if k in kw}
    adapter = kw.pop("adapter", None)
    if kw:
        raise ValueError(f"make_engine: unknown options {sorted(kw)}")
    flash = {"auto": None, "on": True, True: True, "off": False, False: False, "": True, None: True}
    names = {"llamacpp_context_tokens": ("context_tokens", int), "llamacpp_interrupt_poll_s": ("interrupt_poll_s", float),
             "llamacpp_gpu_layers": ("gpu_layers", int), "llamacpp_model_cache_dir": ("model_cache_dir", str)}
    for key, value in llamacpp_kw.items():
        if key == "llamacpp_flash_attention":
            if value not in flash:
                raise ValueError(f"make_engine: llamacpp_flash_attention must be auto, on or off, got {value!r}")
            options["flash_attention"] = flash[value]
        elif key in names:
            if value not in (None, "", 0):       # unset server parameters keep the engine's defaults
                name, convert = names[key]
                options[name] = convert(value)
        else:
            raise ValueError(f"make_engine: unknown llama.cpp option {key!r}")
    if adapter:
        from timely_llm_ros.adapt.lora_gguf import lora_gguf
        from timely_llm_ros.paths import model_cache_dir

        options["lora"] = str(lora_gguf(adapter, model_path, model_cache_dir(options.get("model_cache_dir"))))
    return LlamaCppEngine(model_path, kv_budget_mb=kv_budget_mb, sampling=sampling, **options)
