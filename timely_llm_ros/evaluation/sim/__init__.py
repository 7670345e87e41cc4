"""Simulation: modelled LLM latency, a virtual-clock engine, and a discrete-event loop over workloads."""
from timely_llm_ros.evaluation.sim.clock import VirtualClock
from timely_llm_ros.core.latency_model import LatencyModel, load_latency_model
from timely_llm_ros.evaluation.sim.sim_engine import SimEngine
from timely_llm_ros.evaluation.sim.tokenizer import PieceTokenizer

__all__ = ["LatencyModel", "PieceTokenizer", "SimEngine", "VirtualClock", "load_latency_model"]
