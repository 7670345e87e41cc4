"""Simulation: modelled LLM latency, a virtual-clock engine, and a discrete-event loop over workloads."""
from .clock import VirtualClock
from .latency_model import LatencyModel, load_latency_model
from .sim_engine import SimEngine
from .tokenizer import PieceTokenizer

__all__ = ["LatencyModel", "PieceTokenizer", "SimEngine", "VirtualClock", "load_latency_model"]
