"""What an engine declares it can do (core/engine.py EngineCapabilities), and what the core does with it: the
declaration, not the engine's attributes or methods, decides interrupts, eviction and modelled prompt lengths."""
from __future__ import annotations

import dataclasses

import pytest

from timely_llm_ros.core.engine import Engine, EngineCapabilities, EngineError
from timely_llm_ros.core.eviction import EvictingEngine, with_policy_eviction
from timely_llm_ros.core.latency_model import LatencyModel
from timely_llm_ros.core.policies import make_policy
from timely_llm_ros.evaluation.sim.clock import VirtualClock
from timely_llm_ros.evaluation.sim.sim_engine import SimEngine

LAT = LatencyModel(prefill_a=0.0, prefill_b=1e-4, prefill_c=0.01, decode_base=0.02, decode_per_seq=0.001,
                   decode_per_kv_token=0.0)


@pytest.mark.parametrize("fields", [{"interruptible": True},                         # interruptible, but at "step"
                                    {"interrupt_granularity": "layer"},              # a boundary, not interruptible
                                    {"interruptible": True, "interrupt_granularity": "token"},
                                    {"step_token_budget": 0}])
def test_a_declaration_that_contradicts_itself_is_refused(fields):
    with pytest.raises(ValueError):
        EngineCapabilities(**fields)


def test_the_engine_default_declares_nothing_beyond_the_abstract_methods():
    caps = Engine.capabilities
    assert not (caps.interruptible or caps.fused_steps or caps.prefill_left or caps.reload or caps.evict_prompt_kv
                or caps.set_prompt_tokens)
    assert caps.interrupt_granularity == "step" and caps.step_token_budget is None and caps.replays_forced_ids


def test_the_simulated_engine_declares_what_it_models():
    caps = SimEngine(LAT, VirtualClock(), step_token_budget=64).capabilities
    assert caps.interruptible and caps.interrupt_granularity == "layer"
    assert caps.step_token_budget == 64 and caps.prefill_left and caps.reload
    assert caps.evict_prompt_kv and caps.set_prompt_tokens


def test_eviction_follows_the_declaration():
    """TimeBill's eviction wraps an engine that declares evict_prompt_kv, and only such an engine; one that does
    not (a SimEngine whose declaration says so: a test double of an engine without eviction) keeps its KV, and
    asking it to evict says what to do."""
    timebill = make_policy("timebill")
    evicting = SimEngine(LAT, VirtualClock())
    assert isinstance(with_policy_eviction(evicting, timebill), EvictingEngine)
    assert with_policy_eviction(evicting, make_policy("fcfs")) is evicting

    keeping = SimEngine(LAT, VirtualClock())
    keeping.capabilities = dataclasses.replace(keeping.capabilities, evict_prompt_kv=False)
    assert with_policy_eviction(keeping, timebill) is keeping
    with pytest.raises(EngineError, match="capabilities.evict_prompt_kv"):
        EvictingEngine(keeping, timebill.prompt_kv_eviction)


def test_an_engine_without_a_feature_refuses_it_by_name():
    """Engine's defaults for the optional calls: no eviction and no modelled prompt length, each refusal naming
    the capability; no prefill or reload knowledge (None and 0)."""

    class Minimal(SimEngine):       # a test double: SimEngine's steps under the Engine defaults
        evict_prompt_kv = Engine.evict_prompt_kv
        set_prompt_tokens = Engine.set_prompt_tokens
        prefill_left = Engine.prefill_left
        reload_s = Engine.reload_s

        def __init__(self) -> None:
            super().__init__(LAT, VirtualClock())
            self.capabilities = EngineCapabilities()

    engine = Minimal()
    with pytest.raises(EngineError, match="capabilities.evict_prompt_kv"):
        engine.evict_prompt_kv("a", 0.5)
    with pytest.raises(EngineError, match="capabilities.set_prompt_tokens"):
        engine.set_prompt_tokens("a", 100)
    engine.add("a", [5, 6, 7], 4)
    assert engine.prefill_left("a") is None and engine.reload_s("a") == 0.0


def test_the_engine_process_declares_its_child_engine_but_no_interrupts():
    """ProcessEngine reads the capabilities of the engine it builds in the child, except interrupts: its
    interrupt_check lives in this process, where the child's forward cannot ask it."""
    pytest.importorskip("torch")
    from timely_llm_ros.engine.factory import make_engine
    from timely_llm_ros.engine.process_engine import ProcessEngine

    local = make_engine("transformers", None, num_threads=1, random_config="tiny", step_token_budget=32)
    remote = ProcessEngine("transformers", None, num_threads=1, random_config="tiny", step_token_budget=32)
    try:
        assert local.capabilities.interruptible      # the transformers engine asks between its layers
        assert remote.capabilities == dataclasses.replace(local.capabilities, interruptible=False,
                                                          interrupt_granularity="step")
    finally:
        remote.close()
        local.close()
