"""Linear layers whose weights are packed once for oneDNN (CPU, fp32), sibling projections of one input fused.

torch runs an fp32 ``nn.Linear`` on CPU through MKL's sgemm, which lays the weight out for its kernel again at every
call. At decode batch sizes (a few rows) that repacking is most of the call: on SmolLM2's 30 layers (1 thread) the
linears of a batch-8 step took 73 ms through ``F.linear`` and 40 ms with the weights packed once, 45 vs 40 ms at batch
1 and 800 vs 665 ms for 256 rows. ``pack_linears`` swaps each fp32 CPU ``nn.Linear`` of a model for a module holding
its weight in oneDNN's layout (``torch.ops.mkldnn._reorder_linear_weight``, what torch's inductor uses for frozen CPU
linears) and multiplying with ``torch.ops.mkldnn._linear_pointwise``.

Projections that a layer applies to the same input (``q_proj``/``k_proj``/``v_proj``, ``gate_proj``/``up_proj``) share
one packed weight, their rows stacked: the first of them to see an input runs one GEMM for all, the others take their
columns of its result (``FusedLinears``). Which linears share an input is only assumed from those names: a part called
on an input its siblings did not see runs the whole GEMM for it, so the result is right whatever the model does.

The plain weights are dropped (no second copy), except where another module shares them: a tied LM head keeps its
embedding, so the head's weight is held twice (plain for the embedding, packed for the head). A packed model is for
inference: its ``state_dict`` lacks the packed weights. Results match ``F.linear`` to float rounding (a different
summation order), not bit for bit.
"""
from __future__ import annotations

import torch

# rows the packed layout is chosen for; measured on SmolLM2's shapes, a layout packed for 8 rows runs 1 to 1,536 rows
# as fast as one packed for that many
BATCH_HINT = 8
# sibling linears (one parent module) that Llama-family layers apply to one input
FUSED_NAMES = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def packing_available() -> bool:
    """Whether this torch build has oneDNN's packed linear (CPU builds with mkldnn)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def _packed_gemm(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class PackedLinear(torch.nn.Module):
    """``y = x W^T + b`` with W held in oneDNN's packed layout."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), BATCH_HINT)
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _packed_gemm(x, self.packed, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class FusedLinears:
    """One packed GEMM for linears of one input; each part's output is a view of its columns.

    The last input and its result are kept until every part has taken its columns once (then dropped, so no layer
    holds activations between forwards). The input is recognised by identity and, outside inference mode, torch's
    version counter: another input runs the GEMM again; an inference tensor changed in place between the parts' calls
    would not be noticed (no Llama-family layer does that)."""

    def __init__(self, linears: list[torch.nn.Linear]) -> None:
        weight = torch.cat([lin.weight.detach() for lin in linears])
        biases = [lin.bias for lin in linears]
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, BATCH_HINT)
        self.bias = None if biases[0] is None else torch.cat([b.detach() for b in biases])
        self.sizes = [lin.out_features for lin in linears]
        self._input: torch.Tensor | None = None
        self._version = -1
        self._parts: tuple[torch.Tensor, ...] = ()
        self._untaken: set[int] = set()

    def part(self, index: int, x: torch.Tensor) -> torch.Tensor:
        version = -1 if x.is_inference() else x._version    # inference tensors keep no version counter
        if x is not self._input or version != self._version or index not in self._untaken:
            self._parts = _packed_gemm(x, self.packed, self.bias).split(self.sizes, dim=-1)
            self._input, self._version, self._untaken = x, version, set(range(len(self.sizes)))
        out = self._parts[index]
        self._untaken.discard(index)
        if not self._untaken:
            self._input, self._parts = None, ()
        return out


class FusedLinearPart(torch.nn.Module):
    """One linear of a ``FusedLinears`` group."""

    def __init__(self, group: FusedLinears, index: int, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.group, self.index = group, index
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.group.part(self.index, x)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, part {self.index} of a fused GEMM"


def _packable(module: torch.nn.Module) -> bool:
    return (type(module) is torch.nn.Linear and module.weight.device.type == "cpu"
            and module.weight.dtype == torch.float32)


@torch.no_grad()
def pack_linears(model: torch.nn.Module) -> int:
    """Replace every fp32 CPU ``nn.Linear`` of ``model`` by a packed one, fusing the ``FUSED_NAMES`` siblings of one
    input (in place; packed modules are left as they are). Returns how many linears were replaced; 0 where oneDNN is
    missing."""
    if not packing_available():
        return 0
    replaced = 0
    for parent in list(model.modules()):
        children = dict(parent.named_children())
        for names in FUSED_NAMES:
            group = [children.get(n) for n in names]
            if all(m is not None and _packable(m) for m in group) \
                    and len({(m.in_features, m.bias is None) for m in group}) == 1:
                fused = FusedLinears(group)
                for index, (name, linear) in enumerate(zip(names, group)):
                    setattr(parent, name, FusedLinearPart(fused, index, linear))
                    children.pop(name)
                replaced += len(group)
        for name, child in children.items():
            if _packable(child):
                setattr(parent, name, PackedLinear(child))
                replaced += 1
    if replaced:
        # weights loaded from safetensors are views of the file's memory map, which stays mapped (and the pages
        # of the dropped weights resident) while any view lives: copy the remaining ones (embeddings, norms) out
        for param in model.parameters():
            if param.device.type == "cpu":
                param.data = param.data.clone()
    return replaced
