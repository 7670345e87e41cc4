"""RT-LM's six rule features of a request's text (structural, syntactic, semantic ambiguity, vague words,
open-endedness, multi-part), plus the log-length the MLP needs to scale them.

The paper names the six features but not their word lists; these lists are ours, written for robot tasks.
"""
from __future__ import annotations

import math
import re

_WORD = re.compile(r"[a-z']+|\d+")
AMBIGUOUS = {"it", "them", "that", "this", "those", "there", "thing", "things", "one", "ones", "stuff", "place",
             "right", "left", "up", "clear", "check", "set", "put", "move", "take", "get"}
VAGUE = {"some", "any", "anything", "something", "maybe", "around", "nearby", "somewhere", "whatever", "few",
         "several", "kind", "sort", "stuff", "bit", "perhaps", "possibly"}
OPEN_ENDED = {"all", "every", "each", "describe", "explain", "explore", "sort", "clean", "tidy", "organize", "build",
              "stack", "classify", "search", "inspect", "survey", "list", "tell", "what", "why", "how", "tower"}
CONNECTIVES = {"and", "then", "or", "after", "before", "while", "if", "until", "but", "also", "plus"}
NUMBERS = {"two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "both"}
N_FEATURES = 7


def rule_features(text: str) -> list[float]:
    """[structural, syntactic, ambiguity, vague, open-ended, multi-part, log(1 + words)] of text."""
    low = text.lower()
    words = _WORD.findall(low)
    n = max(len(words), 1)
    structural = len(words) / 10.0 + low.count(";") + low.count(".") * 0.5
    syntactic = sum(w in CONNECTIVES for w in words) + low.count(",") * 0.5
    ambiguity = sum(w in AMBIGUOUS for w in words) / n * 10.0
    vague = sum(w in VAGUE for w in words)
    open_ended = sum(w in OPEN_ENDED for w in words)
    multi = sum(w in NUMBERS or w.isdigit() for w in words) + low.count(" and ") + low.count(",")
    return [structural, syntactic, ambiguity, vague, open_ended, multi, math.log1p(len(words))]


def request_text(task: str, context: str = "") -> str:
    """The text a predictor reads: the task, then the scene it refers to."""
    return f"{task} | {context}" if context else task
