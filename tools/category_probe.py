"""Does a pretrained model know what kind of thing each object is? A zero-shot probe of the knowledge that the arm's
sorting and cleaning tasks need (a mango goes in the fruit basket, a receipt in the trash bin), so that a team can
see whether a model is big enough for them before adapting it (docs/plan_quality.md).

    PYTHONPATH=. .venv/bin/python tools/category_probe.py [--model smollm2] [--threads 2]

For every name of two categories of the training vocabulary (config/adapt/vocabulary.yaml), the model reads a
question and the probe compares the log-probabilities of the two answers. It prints the balanced accuracy (the mean
of the two categories' accuracies): 50% is what a model that always gives the same answer scores, 100% is a model
that knows every name. Loads the model's converted HF folder with transformers; no adapter (the plain pretrained
knowledge the adapter starts from).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from timely_llm_ros.adapt.vocabulary import load_vocabulary  # noqa: E402
from timely_llm_ros.engine.benchkit import model_folder  # noqa: E402

# (question, answer for the first kinds, answer for the second kinds, first kinds, second kinds)
PROBES: tuple[tuple[str, str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("Is a {x} a fruit or a vegetable? A {x} is a", " fruit", " vegetable", ("fruit",), ("vegetable",)),
    ("Question: is a {x} fruit or vegetable?\nAnswer:", " fruit", " vegetable", ("fruit",), ("vegetable",)),
    ("Should a {x} be thrown in the trash bin? Answer:", " Yes", " No", ("trash",), ("stationery", "dishes")),
    ("Is a {x} garbage? Answer:", " Yes", " No", ("trash",), ("stationery", "dishes")),
)


class Scorer:
    """Which of two one-token answers a model finds likelier after a question: one forward pass per question."""

    def __init__(self, folder: Path) -> None:
        self.tok = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()

    def answer_id(self, answer: str) -> int:
        """The token id of an answer; ValueError when the answer is more than one token for this tokenizer."""
        ids = self.tok(answer, add_special_tokens=False).input_ids
        if len(ids) != 1:
            raise ValueError(f"answer {answer!r} is {len(ids)} tokens for this tokenizer; the probe needs one")
        return ids[0]

    @torch.no_grad()
    def prefers_first(self, question: str, first: int, second: int) -> bool:
        logits = self.model(torch.tensor([self.tok(question).input_ids])).logits[0, -1]
        return bool(logits[first] > logits[second])


def probe(scorer: Scorer, question: str, first: str, second: str,
          names: Sequence[tuple[str, bool]]) -> tuple[float, float]:
    """(accuracy on the first kind's names, on the second kind's): a name counts as known when its own answer is
    the likelier one."""
    a, b = scorer.answer_id(first), scorer.answer_id(second)
    right = {True: [0, 0], False: [0, 0]}
    for name, is_first in names:
        right[is_first][0] += scorer.prefers_first(question.format(x=name), a, b) == is_first
        right[is_first][1] += 1
    return right[True][0] / max(1, right[True][1]), right[False][0] / max(1, right[False][1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2", help="an entry of config/models.yaml or an HF folder")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    folder = model_folder(args.model)
    scorer = Scorer(folder)
    vocab = load_vocabulary()
    print(f"model: {folder.name}; vocabulary: {vocab.source}")
    print("| question | names (first / second kind) | first kind right | second kind right | balanced accuracy |")
    print("|---|---|---|---|---|")
    for question, first, second, kinds_a, kinds_b in PROBES:
        names = [(n, True) for n, _ in vocab.names(kinds_a)] + [(n, False) for n, _ in vocab.names(kinds_b)]
        a, b = probe(scorer, question, first, second, names)
        n_a = sum(1 for _, f in names if f)
        shown = question.replace("\n", " ").format(x="X")
        print(f"| {shown!r} ->{first!r}/{second!r} | {n_a} {'+'.join(kinds_a)} / {len(names) - n_a} "
              f"{'+'.join(kinds_b)} | {a:.0%} | {b:.0%} | {(a + b) / 2:.0%} |")
    print("50% is a model that always gives the same answer.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
