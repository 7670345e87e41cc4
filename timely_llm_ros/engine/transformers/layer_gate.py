"""Interrupts: a step of the transformers engine can end between two decoder layers.

A forward pre-hook on every decoder layer asks the check the gate holds while a step runs (the engine's
``interrupt_check``, set by the driver); when it answers True the forward stops there with ``StepInterrupted``,
which the engine catches. Outside a step the gate holds no check and the hooks ask nothing, so other forwards of
the same model (``generate()``, a reference run) are never cut. The hooks hold the gate weakly and are removed when
it goes: a model outlives its engines (tests, a reconfigure).
"""
from __future__ import annotations

import functools
import weakref
from typing import Callable

import torch


class StepInterrupted(Exception):
    """Raised between decoder layers when the gate's check asks to end the step (never escapes Engine.step)."""


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's decoder layers: the module list as long as its config's num_hidden_layers (``model.layers`` in
    Llama-family models). Empty when there is none to find (the engine then cannot be interrupted)."""
    n = getattr(model.config, "num_hidden_layers", None)
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n:
            return list(module)
    return []


class LayerGate:
    """Hooks on a model's decoder layers that end the forward in flight when ``check`` says so."""

    def __init__(self, model: torch.nn.Module) -> None:
        layers = decoder_layers(model)
        self.available = bool(layers)             # False: the model has no decoder layers to hook
        self.check: Callable[[], bool] | None = None   # asked at each layer while set (the engine sets it per step)
        ask = functools.partial(_ask, weakref.ref(self))
        self._handles = [layer.register_forward_pre_hook(ask) for layer in layers]
        weakref.finalize(self, _remove_hooks, self._handles)

    def remove(self) -> None:
        """Take the hooks off the model."""
        _remove_hooks(self._handles)


def _ask(gate_ref: "weakref.ref[LayerGate]", module: torch.nn.Module, args) -> None:
    """Forward pre-hook of each decoder layer: end the forward here if the gate's check says so (the check is
    dropped first, so a step is cut once)."""
    gate = gate_ref()
    if gate is not None and gate.check is not None and gate.check():
        gate.check = None
        raise StepInterrupted


def _remove_hooks(handles: list) -> None:
    for handle in handles:
        handle.remove()
    handles.clear()
