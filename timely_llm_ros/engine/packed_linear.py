"""Linear layers whose weights are packed once for oneDNN (CPU, fp32).

torch runs an fp32 ``nn.Linear`` on CPU through MKL's sgemm, which lays the weight out for its kernel again at every
call. At decode batch sizes (a few rows) that repacking is most of the call: on SmolLM2's 30 layers (1 thread) the
linears of a batch-8 step took 73 ms through ``F.linear`` and 40 ms with the weights packed once, 45 vs 40 ms at batch
1 and 800 vs 665 ms for 256 rows. ``pack_linears`` swaps each fp32 CPU ``nn.Linear`` of a model for a ``PackedLinear``
holding the weight in oneDNN's layout (``torch.ops.mkldnn._reorder_linear_weight``, what torch's inductor uses for
frozen CPU linears) and multiplying with ``torch.ops.mkldnn._linear_pointwise``.

The plain weight is dropped (no second copy), except where another module shares it: a tied LM head keeps its
embedding, which also feeds the packed copy of the head. A packed model is for inference: its ``state_dict`` lacks the
packed weights. Results match ``F.linear`` to float rounding (a different summation order), not bit for bit.
"""
from __future__ import annotations

import torch

# rows the packed layout is chosen for; measured on SmolLM2's shapes, a layout packed for 8 rows runs 1 to 1,536 rows
# as fast as one packed for that many
BATCH_HINT = 8


def packing_available() -> bool:
    """Whether this torch build has oneDNN's packed linear (CPU builds with mkldnn)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class PackedLinear(torch.nn.Module):
    """``y = x W^T + b`` with W held in oneDNN's packed layout."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), BATCH_HINT)
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


@torch.no_grad()
def pack_linears(model: torch.nn.Module) -> int:
    """Replace every fp32 CPU ``nn.Linear`` of ``model`` by a ``PackedLinear`` (in place; a packed one is left as it
    is). Returns how many were replaced; 0 where oneDNN is missing."""
    if not packing_available():
        return 0
    targets = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
               if type(child) is torch.nn.Linear and child.weight.device.type == "cpu"
               and child.weight.dtype == torch.float32]
    for parent, name, child in targets:
        setattr(parent, name, PackedLinear(child))
    return len(targets)
