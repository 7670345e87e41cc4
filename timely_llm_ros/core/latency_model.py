"""Modelled LLM step latency: prefill a*n_new*n_ctx + b*n_new (+ c once per step), decode base + per_seq*B + per_kv*KV.

YAML schema (config/latency/<name>.yaml; engine/transformers/profiler.py writes the same keys)::

    prefill: {a: s/token^2, b: s/token, c: s}     # cold prefill of n tokens: a*n^2 + b*n + c
    decode: {base: s, per_seq: s, per_kv_token: s}  # one decode step of B sequences holding KV tokens
    network_delay_s: 0.008                          # server -> robot
    source: "how the numbers were obtained"
    # optional
    kv: {bytes_per_token: 131072, budget_bytes: 6.0e9, reload_bytes_per_s: 1.8e10}
    cached_prefix_tokens: 0                         # shared prompt prefix served from a prefix cache
    step_overhead_s: 0.0                            # the serving loop's own time per step, beside the forward
    layers: 32                                      # decoder layers: where an interrupted step can end (1: only
                                                    # at its end, i.e. never cut short)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from timely_llm_ros.paths import config_dir


@dataclass(frozen=True)
class LatencyModel:
    """Step-time model of one engine on one device (seconds)."""

    prefill_a: float
    prefill_b: float
    prefill_c: float
    decode_base: float
    decode_per_seq: float
    decode_per_kv_token: float
    network_delay_s: float = 0.0
    kv_bytes_per_token: float = 131072.0
    kv_budget_bytes: float = math.inf
    reload_bytes_per_s: float = math.inf
    cached_prefix_tokens: int = 0
    step_overhead_s: float = 0.0     # the serving loop's own time per engine step: passes on the clock, but is no
                                     # part of the step's elapsed time the engine reports (SimEngine)
    layers: int = 1                  # decoder layers of the model: an interrupt ends a step at a layer boundary
    source: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def prefill_s(self, n_new: int, n_ctx: int | None = None) -> float:
        """Per-sequence prefill cost of n_new tokens attending over n_ctx (default n_new) tokens, without c."""
        n_ctx = n_new if n_ctx is None else n_ctx
        return self.prefill_a * n_new * n_ctx + self.prefill_b * n_new

    def cold_prefill_s(self, n: int) -> float:
        """A lone prefill of n prompt tokens: a*n^2 + b*n + c."""
        return self.prefill_s(n) + self.prefill_c

    def decode_s(self, batch: int, kv_tokens: int) -> float:
        """One decode step of batch sequences holding kv_tokens tokens of context in total."""
        if batch <= 0:
            return 0.0
        return self.decode_base + self.decode_per_seq * batch + self.decode_per_kv_token * kv_tokens

    def step_s(self, prefills: Iterable[tuple[int, int]], decode_batch: int, decode_kv_tokens: int) -> float:
        """A mixed step: prefills as (n_new, n_ctx) pairs (c paid once), plus one decode of the others."""
        pre = [self.prefill_s(n, ctx) for n, ctx in prefills]
        t = (sum(pre) + self.prefill_c) if pre else 0.0
        return t + self.decode_s(decode_batch, decode_kv_tokens)

    def interrupted_s(self, elapsed: float, reload_s: float, at: float) -> float:
        """Where a step of `elapsed` seconds (its first `reload_s` moving KV back from host) ends when an interrupt
        is raised `at` seconds into it: the KV reloads complete, then the layer in progress does (a check runs
        before each of the model's `layers` decoder layers). Returns `elapsed` when that is the step's end."""
        forward = elapsed - reload_s
        if forward <= 0.0 or self.layers <= 1:
            return elapsed
        q = forward / self.layers
        return min(elapsed, reload_s + math.ceil(max(at - reload_s, 0.0) / q - 1e-9) * q)

    def under_load(self, slowdown: float, step_overhead_s: float) -> "LatencyModel":
        """This engine on a loaded machine: every forward-pass coefficient times `slowdown`, and a fixed
        `step_overhead_s` per step for the serving loop's own work (both measured on a real run: ros_burst.py)."""
        k = float(slowdown)
        return replace(self, prefill_a=self.prefill_a * k, prefill_b=self.prefill_b * k,
                       prefill_c=self.prefill_c * k, decode_base=self.decode_base * k,
                       decode_per_seq=self.decode_per_seq * k, decode_per_kv_token=self.decode_per_kv_token * k,
                       step_overhead_s=float(step_overhead_s))

    def reload_s(self, tokens: int) -> float:
        """Time to move the KV of tokens from host back to the device."""
        if math.isinf(self.reload_bytes_per_s):
            return 0.0
        return tokens * self.kv_bytes_per_token / self.reload_bytes_per_s

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LatencyModel":
        pre, dec, kv = d["prefill"], d["decode"], d.get("kv") or {}
        known = {"prefill", "decode", "kv", "network_delay_s", "source", "cached_prefix_tokens", "step_overhead_s",
                 "layers"}
        return cls(
            prefill_a=float(pre.get("a", 0.0)), prefill_b=float(pre.get("b", 0.0)), prefill_c=float(pre.get("c", 0.0)),
            decode_base=float(dec["base"]), decode_per_seq=float(dec.get("per_seq", 0.0)),
            decode_per_kv_token=float(dec.get("per_kv_token", 0.0)),
            network_delay_s=float(d.get("network_delay_s", 0.0)),
            kv_bytes_per_token=float(kv.get("bytes_per_token", 131072.0)),
            kv_budget_bytes=float(kv.get("budget_bytes", math.inf)),
            reload_bytes_per_s=float(kv.get("reload_bytes_per_s", math.inf)),
            cached_prefix_tokens=int(d.get("cached_prefix_tokens", 0)),
            step_overhead_s=float(d.get("step_overhead_s", 0.0)),
            layers=max(1, int(d.get("layers", 1))),
            source=str(d.get("source", "")),
            extra={k: v for k, v in d.items() if k not in known},
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "prefill": {"a": self.prefill_a, "b": self.prefill_b, "c": self.prefill_c},
            "decode": {"base": self.decode_base, "per_seq": self.decode_per_seq,
                       "per_kv_token": self.decode_per_kv_token},
            "network_delay_s": self.network_delay_s,
            "kv": {"bytes_per_token": self.kv_bytes_per_token, "budget_bytes": self.kv_budget_bytes,
                   "reload_bytes_per_s": self.reload_bytes_per_s},
            "cached_prefix_tokens": self.cached_prefix_tokens,
            "step_overhead_s": self.step_overhead_s,
            "layers": self.layers,
            "source": self.source,
        }
        out.update(self.extra)
        return out


def load_latency_model(name_or_path: str | Path) -> LatencyModel:
    """Load config/latency/<name>.yaml, or a YAML file given by path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = config_dir() / "latency" / f"{name_or_path}.yaml"
    with open(path, encoding="utf-8") as f:
        return LatencyModel.from_dict(yaml.safe_load(f))
