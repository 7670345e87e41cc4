"""Urgency level of a request from its text (semantic scheduling): a softmax classifier over sentence embeddings,
trained on a labelled set this module writes. The embeddings are the caller's (``encode``: texts -> an array of
L2-normalised vectors); engine/sentence_encoder.py gives all-MiniLM-L6-v2's, the ones the shipped head was trained
on, and the classifier built on them.

Levels follow the 5 Emergency Severity Index levels, rank 0 = most urgent:
  0 life at risk / emergency   1 imminent hazard   2 time-critical   3 routine task   4 whenever convenient
The labelled set: templates x slot fillers per level; the held-out split is by template (unseen phrasings).
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from timely_llm_ros.core.predictors.length import predictor_dir
from timely_llm_ros.core.predictors.mlp import MLP

LEVEL_NAMES = ("emergency", "hazard", "time-critical", "routine", "low")
_PEOPLE = ["a person", "a child", "an elderly man", "a worker", "the resident", "a visitor", "a woman", "the patient"]
_OBJ = ["cup", "book", "box", "bottle", "phone", "toy", "towel", "plate", "remote", "bag", "shoe", "pen"]
_PLACE = ["kitchen", "hallway", "garage", "bedroom", "office", "living room", "stairs", "workshop"]
_HAZ = ["ball", "drone", "door", "car", "cable", "bird", "falling shelf", "swinging arm"]
TEMPLATES: dict[int, list[str]] = {
    0: ["{p} collapsed in the {l}, get help now", "fire in the {l}! guide everyone out", "{p} is not breathing",
        "{p} fell down the stairs and is bleeding", "smoke is filling the {l}, find {p} immediately",
        "emergency: {p} is trapped under a shelf in the {l}", "call for help, {p} is unconscious",
        "gas leak in the {l}, evacuate {p} now", "{p} is choking in the {l}", "help! {p} is drowning"],
    1: ["a {h} is coming right at you, dodge it", "watch out, {h} ahead, stop", "avoid the {h} on your left now",
        "the {h} is about to hit you, move away", "collision warning: {h} in front", "a {h} is falling toward you",
        "brake, there is a {h} in your path", "get clear of the {h} behind you", "incoming {h}, climb now",
        "the {h} swings toward you, back off"],
    2: ["bring the medicine to {p} before it is too late", "{p} needs the {o} in the {l} within a minute",
        "hurry, take the {o} to {p} now", "quickly fetch the {o}, {p} is waiting", "the oven in the {l} is "
        "overheating, turn it off soon", "deliver the {o} to the {l} right away", "{p} is late, bring the {o} fast",
        "the water is boiling over in the {l}, check it quickly", "open the door for {p} right now",
        "the {o} is about to fall off the table in the {l}, catch it"],
    3: ["look for the {o} in the {l}", "check whether the {o} is on the table", "take a picture of the {l}",
        "put the {o} in the basket", "find the {o} and bring it here", "go to the {l} and scan it",
        "pick up the {o} and place it on the shelf", "tell me what is in the {l}", "count the {o}s in the {l}",
        "move the {o} next to the {o}"],
    4: ["when you have time, tidy the {l}", "sometime today, sort the {o}s", "no rush, dust the shelf in the {l}",
        "later, organise the books", "whenever you are free, water the plants in the {l}",
        "if nothing else is going on, fold the towels", "at some point, say hello to {p}",
        "low priority: clean the {l} windows", "eventually rearrange the {o}s by colour",
        "this can wait: check the {o} inventory"],
}


def labelled_set(per_template: int = 12, seed: int = 0) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(train, held-out) lists of (text, level); templates 0-7 of each level train, 8-9 are held out."""
    rng = random.Random(seed)
    train, held = [], []
    for level, temps in TEMPLATES.items():
        for ti, tmpl in enumerate(temps):
            for _ in range(per_template):
                text = tmpl.format(p=rng.choice(_PEOPLE), o=rng.choice(_OBJ), l=rng.choice(_PLACE), h=rng.choice(_HAZ))
                (held if ti >= 8 else train).append((text[0].upper() + text[1:], level))
    return train, held


Encode = Callable[[Sequence[str]], np.ndarray]   # texts -> one L2-normalised embedding per row


class UrgencyClassifier:
    """Text -> urgency level 0..4 (cached per text)."""

    def __init__(self, net: MLP, encode: Encode) -> None:
        self.net = net
        self.encode = encode
        self._cache: dict[str, int] = {}

    def level(self, text: str) -> int:
        if text not in self._cache:
            self._cache[text] = int(self.net.predict(self.encode([text]))[0].argmax())
        return self._cache[text]

    def levels(self, texts: Sequence[str]) -> list[int]:
        todo = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if todo:
            for t, p in zip(todo, self.net.predict(self.encode(todo)).argmax(1)):
                self._cache[t] = int(p)
        return [self._cache[t] for t in texts]

    @classmethod
    def load(cls, encode: Encode, path: str | Path | None = None) -> "UrgencyClassifier":
        """The shipped head (models/predictors/urgency_minilm.npz, trained on MiniLM embeddings) over ``encode``."""
        net, _ = MLP.load(path or predictor_dir() / "urgency_minilm.npz")
        return cls(net, encode)


def train(encode: Encode, encoder_name: str, out: Path | None = None, seed: int = 0) -> dict:
    """Fit the softmax head on the labelled set's embeddings; returns held-out accuracy per level."""
    import json

    train_set, held = labelled_set(seed=seed)
    Xt, Xh = encode([t for t, _ in train_set]), encode([t for t, _ in held])
    yt, yh = np.array([y for _, y in train_set]), np.array([y for _, y in held])
    net = MLP(Xt.shape[1], [], len(LEVEL_NAMES), "classifier", seed)
    net.fit(Xt, yt, epochs=150, lr=1e-2, seed=seed)
    pred = net.predict(Xh).argmax(1)
    out = out or predictor_dir()
    net.save(out / "urgency_minilm.npz")
    m = {"encoder": encoder_name, "train": len(yt), "heldout": len(yh),
         "heldout_accuracy": float((pred == yh).mean()),
         "per_level_accuracy": {LEVEL_NAMES[k]: float((pred[yh == k] == k).mean()) for k in range(len(LEVEL_NAMES))},
         "within_one_level": float((np.abs(pred - yh) <= 1).mean())}
    (out / "urgency_metrics.json").write_text(json.dumps(m, indent=1))
    return m
