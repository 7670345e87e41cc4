"""Next-token choice: greedy for the whole batch in one op, seeded temperature/top-p per generation."""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch


@dataclass
class SamplingParams:
    """temperature 0 = greedy; top_p in (0, 1]."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def generator_for(gen_id: str, params: SamplingParams, device: torch.device) -> torch.Generator | None:
    """A generator seeded from (seed, gen id), so a generation's samples do not depend on its batch mates."""
    if params.greedy:
        return None
    g = torch.Generator(device=device)
    g.manual_seed(params.seed * 1_000_003 + zlib.crc32(gen_id.encode()))
    return g


def sample_row(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> int:
    """Sample one token from a row of logits with temperature and nucleus (top-p) filtering."""
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_p, order = probs.sort(descending=True)
        keep = sorted_p.cumsum(-1) - sorted_p < params.top_p
        probs = torch.zeros_like(probs).scatter(-1, order[keep], sorted_p[keep])
    return int(torch.multinomial(probs, 1, generator=generator))


def choose_tokens(logits: torch.Tensor, params: SamplingParams,
                  generators: list[torch.Generator | None]) -> list[int]:
    """One token per row of ``logits [batch, vocab]``."""
    if params.greedy:
        return logits.argmax(-1).tolist()
    return [sample_row(logits[i], params, g) for i, g in enumerate(generators)]
