"""Plan validity of the planner: greedy-decode held-out prompts, count plans that parse under the skill grammar.

    python -m tools.embedded_planner.evaluate --model models/default_planner [--n 300]

The grammar is the core's (``timely_llm_ros.core.skills.load_skill_sets``) when it is importable; otherwise a
small built-in checker of the same languages is used (``fallback_problems``).
"""
from __future__ import annotations

import argparse
import re
import time
from dataclasses import dataclass
from typing import Callable

from tools.embedded_planner.corpus import Example, generate, split

DRONE_SKILLS = {"mf", "mb", "ml", "mr", "mu", "md", "tc", "tu", "d", "iv", "ox", "oy", "ow", "oh", "od", "p", "l",
                "tp", "rp", "g", "s", "sa"}
ARM_SKILLS = {"sc", "gt", "pi", "dr", "mv"}
_TOKEN = re.compile(r"\s*(?:(?P<str>'[^']*')|(?P<num>-?\d+(?:\.\d+)?)|(?P<name>[A-Za-z_]\w*)"
                    r"|(?P<op>->|==|!=|[<>&|?=;(){},]))")


def _lex(text: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    while pos < len(text.rstrip()):
        m = _TOKEN.match(text, pos)
        if not m:
            raise SyntaxError(f"unexpected character {text[pos]!r} at {pos}")
        tokens.append((m.lastgroup, m.group(m.lastgroup)))
        pos = m.end()
    return tokens


class _Parser:
    """Recursive descent over MiniSpec (the arm language is its subset of call statements)."""

    def __init__(self, text: str, skills: set[str]) -> None:
        self.toks, self.i, self.skills = _lex(text), 0, skills

    def peek(self, k: int = 0) -> tuple[str, str]:
        return self.toks[self.i + k] if self.i + k < len(self.toks) else ("end", "")

    def eat(self, value: str | None = None, kind: str | None = None) -> str:
        k, v = self.peek()
        if (value is not None and v != value) or (kind is not None and k != kind):
            raise SyntaxError(f"expected {value or kind}, got {v or 'end'}")
        self.i += 1
        return v

    def program(self, until: str = "end") -> None:
        while self.peek()[0] != until and self.peek()[1] != until:
            self.statement()

    def statement(self) -> None:
        k, v = self.peek()
        if v == "?":
            self.eat("?")
            self.condition()
            self.block()
        elif k == "num" and self.peek(1)[1] == "{":
            self.eat(kind="num")
            self.block()
        elif v == "->":
            self.eat("->")
            self.operand()
            self.eat(";")
        elif k == "name" and v.startswith("_") and self.peek(1)[1] == "=":
            self.i += 2
            self.call()
            self.eat(";")
        else:
            self.call()
            self.eat(";")

    def block(self) -> None:
        self.eat("{")
        self.program(until="}")
        self.eat("}")

    def condition(self) -> None:
        self.comparison()
        while self.peek()[1] in ("&", "|"):
            self.i += 1
            self.comparison()

    def comparison(self) -> None:
        self.operand()
        if self.peek()[1] in ("==", "!=", "<", ">"):
            self.i += 1
            self.operand()

    def operand(self) -> None:
        k, v = self.peek()
        if k == "name" and self.peek(1)[1] == "(":
            self.call()
        elif k in ("num", "str", "name"):
            self.i += 1
        else:
            raise SyntaxError(f"expected a value, got {v or 'end'}")

    def call(self) -> None:
        name = self.eat(kind="name")
        if name not in self.skills:
            raise SyntaxError(f"unknown skill {name!r}")
        self.eat("(")
        while self.peek()[1] != ")":
            if self.peek()[0] not in ("num", "str", "name"):
                raise SyntaxError(f"bad argument {self.peek()[1]!r} to {name}")
            self.i += 1
            if self.peek()[1] == ",":
                self.i += 1
        self.eat(")")


def fallback_problems(robot_type: str, text: str) -> list[str]:
    """Problems of ``text`` under the built-in checker ([] = valid)."""
    if not text.strip():
        return ["empty plan"]
    if robot_type == "chat":
        ok = text.strip()[-1] in ".!?" and not re.search(r"[;{}()]", text)
        return [] if ok else ["chat reply must be plain sentences ending in . ! or ?"]
    skills = {"drone": DRONE_SKILLS, "arm": ARM_SKILLS}.get(robot_type)
    if skills is None:
        return [f"unknown robot type {robot_type!r}"]
    try:
        parser = _Parser(text, skills)
        if robot_type == "arm":
            while parser.peek()[0] != "end":
                parser.call()
                parser.eat(";")
        else:
            parser.program()
    except SyntaxError as exc:
        return [str(exc)]
    return []


def plan_checker() -> tuple[str, Callable[[str, str], list[str]]]:
    """(name, check(robot_type, text) -> problems): the core grammar if it exists, else the fallback."""
    try:
        from timely_llm_ros.core.skills import load_skill_sets

        sets = load_skill_sets()
    except Exception:  # the core grammar is not there (yet)
        return "fallback", fallback_problems

    def core_problems(robot_type: str, text: str) -> list[str]:
        if robot_type not in sets:
            return [f"unknown robot type {robot_type!r}"]
        return list(sets[robot_type].validate_plan(text))

    return "core", core_problems


@dataclass
class Report:
    """Outcome of one evaluation run."""

    n: int
    valid: float           # share of plans valid under the grammar (core's when it exists)
    valid_strict: float    # share also valid under the built-in checker (complete statements, plain chat)
    mentions_key: float    # share of drone/arm plans naming the task's key object (when it is an object)
    exact: float           # share identical to the reference plan
    grammar: str
    seconds: float


def heldout_examples(n: int, seed: int = 1234) -> list[Example]:
    """``n`` held-out examples (unseen (template, key) pairs), deterministic per seed."""
    out: list[Example] = []
    batch = 0
    while len(out) < n:
        out += split(generate(4 * n, seed=seed + batch))[1]
        batch += 1
    return out[:n]


def greedy_plans(model, tokenizer, prompts: list[str], max_new_tokens: int = 200, batch_size: int = 32) -> list[str]:
    """Greedy plans for ``prompts`` (batched, left-padded), without the prompt and the EOS."""
    import torch

    tokenizer.padding_side = "left"
    plans: list[str] = []
    for start in range(0, len(prompts), batch_size):
        enc = tokenizer(prompts[start:start + batch_size], return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens,
                                 pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        new = out[:, enc["input_ids"].shape[1]:]
        plans += [t.strip() for t in tokenizer.batch_decode(new, skip_special_tokens=True)]
    return plans


def evaluate(model, tokenizer, n: int = 300, seed: int = 1234) -> Report:
    """Greedy-decode ``n`` held-out prompts and measure plan validity."""
    t0 = time.perf_counter()
    examples = heldout_examples(n, seed)
    plans = greedy_plans(model, tokenizer, [e.prompt for e in examples])
    grammar, check = plan_checker()
    ok = [not check(e.robot_type, p) for e, p in zip(examples, plans)]
    strict = sum(v and not fallback_problems(e.robot_type, p) for v, e, p in zip(ok, examples, plans))
    objective = [(e, p) for e, p in zip(examples, plans)
                 if e.robot_type != "chat" and e.key in e.task and not e.template.startswith("purpose")]
    mentions = sum(f"'{e.key}'" in p or f"({e.key}" in p for e, p in objective)
    exact = sum(e.plan == p for e, p in zip(examples, plans))
    n = len(examples)
    return Report(n, sum(ok) / n, strict / n, mentions / max(1, len(objective)), exact / n,
                  grammar, time.perf_counter() - t0)


def main() -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model dir (default: the embedded planner)")
    ap.add_argument("--n", type=int, default=300, help="held-out prompts to decode")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.model is None:
        from timely_llm_ros.paths import default_model_dir

        args.model = str(default_model_dir())
    model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    r = evaluate(model, AutoTokenizer.from_pretrained(args.model), args.n)
    print(f"valid plans: {r.valid:.1%} of {r.n} held-out prompts ({r.grammar} grammar; "
          f"strict {r.valid_strict:.1%}); "
          f"key object named: {r.mentions_key:.1%}; exact: {r.exact:.1%}; {r.seconds:.1f} s")


if __name__ == "__main__":
    main()
