"""Arm tasks of the heldout split: objects, places and phrasings of their own, written apart from the dev/test tables
(tools/evalset/arm.py) and from every prompt, worked example and training corpus (test/test_heldout_isolation.py
checks that none of those draws from them). The plans follow the conventions in tools/evalset/arm.py's HEADER; every
kind of the dev/test tables is represented: stacking odd objects, clearing a workbench (scraps, tools and fasteners
to their places), sorting bakery and cheese, putting kitchen things into places and at coordinates, and asking for
a kitchen thing the table lacks.
"""
from __future__ import annotations

import random
from typing import Callable

from timely_llm_ros.evaluation.evalset import EvalTask
from timely_llm_ros.evaluation.goals import Placed
from tools.evalset import arm
from tools.evalset.arm import draft, q

# ------------------------------------------------------------------ tables
STACKABLES = ["coaster", "matchbox", "domino", "cork", "poker chip", "tea tin", "cassette", "floppy disk", "spool",
              "hockey puck", "jar lid", "brass weight", "wooden ring"]
SCRAPS = ["wood shaving", "offcut", "sandpaper scrap", "bent nail", "zip tie clipping"]
HAND_TOOLS = ["chisel", "awl", "hand plane", "mallet head", "putty knife"]
FASTENERS = ["hinge", "bracket", "wing nut", "grommet", "rivet"]
BENCH_PLACE = {**{s: "scrap bucket" for s in SCRAPS}, **{t: "tool chest" for t in HAND_TOOLS},
               **{f: "parts tray" for f in FASTENERS}}
BREADS = ["baguette", "croissant", "bagel", "muffin", "pretzel", "scone"]
CHEESES = ["brie", "cheddar", "gouda", "feta", "camembert", "halloumi"]
KITCHEN = ["teapot", "whisk", "ladle", "colander", "rolling pin", "pepper mill", "egg timer", "butter dish"]
SPOTS = ["crate", "dish rack", "utensil holder", "hamper", "tote", "cubby"]

# ------------------------------------------------------------------ phrasings
STACK2 = ["rest the {top} upon the {base}", "balance the {top} on the {base}", "the {top} should sit on the {base}"]
STACK3 = ["a pile of three: {bottom} underneath, {middle} in the middle, {top} crowning it",
          "layer the {middle} over the {bottom} and cap it with the {top}",
          "I'd like the {bottom} at the base with the {middle} above and the {top} uppermost"]
TOWER4 = ["from the ground up: {b1}, {b2}, {b3}, {b4}; pile them",
          "raise a column of four with {b1} lowest and {b4} highest, {b2} and {b3} between in that order"]
CLEAN = ["the workbench needs clearing, everything to its proper spot", "put the bench to rights",
         "return each thing on the workbench to where it is kept"]
SCRAPS_ONLY = ["sweep the scraps into the scrap bucket and touch nothing else",
               "only the scraps go, into the scrap bucket please"]
SORT = ["bread goes in the bread bin and cheese in the cheese box", "split the bakery items from the cheeses",
        "file the bakes and the cheeses into their containers"]
SORT_BREAD = ["just the bakes into the bread bin, cheeses stay", "bread bin for the bread, nothing else moves"]
SORT_CHEESE = ["cheeses only into the cheese box", "stow the cheese in the cheese box and leave the bread out"]
INTO1 = ["pop the {o} into the {p}", "the {o} needs to go in the {p}", "stow the {o} inside the {p}"]
INTO2 = ["stow the {o} in the {p} and after that the {o2} in the {p2}",
         "two jobs: {o} into the {p}, {o2} into the {p2}"]
AT1 = ["shift the {o} so it ends at ({x}, {y})", "park the {o} at coordinates {x}, {y}"]
AT2 = ["park the {o} at ({x}, {y}) and the {o2} at ({u}, {v})", "{o} to {x}, {y}; {o2} to {u}, {v}"]


# ------------------------------------------------------------------ kinds
def carry(obj: str, dest: str) -> str:
    return f"gt({q(obj)});pi({q(obj)});gt({q(dest)});dr();"


def named_in_order(template: str, values: dict[str, str]) -> list[str]:
    return [values[s] for s in sorted(values, key=lambda name: template.index("{" + name + "}"))]


def pile(rng: random.Random, kind: str, phrases: list[str], slots: list[str]) -> EvalTask:
    chosen = rng.sample(STACKABLES, len(slots) + rng.randint(0, 2))
    levels = chosen[:len(slots)]
    template = rng.choice(phrases)
    values = dict(zip(slots, levels))
    table = list(chosen)
    rng.shuffle(table)
    plan = "".join(f"sc({q(b)});" for b in named_in_order(template, values))
    plan += "".join(carry(upper, lower) for lower, upper in zip(levels, levels[1:]))
    goal = Placed(tuple((upper, lower) for lower, upper in zip(levels, levels[1:])))
    return draft(kind, "normal", f"table: {', '.join(table)}", template.format(**values), plan, goal, tuple(levels))


def stack2(rng: random.Random) -> EvalTask:
    return pile(rng, "stack2", STACK2, ["base", "top"])


def stack3(rng: random.Random) -> EvalTask:
    return pile(rng, "stack3", STACK3, ["bottom", "middle", "top"])


def tower4(rng: random.Random) -> EvalTask:
    return pile(rng, "tower4", TOWER4, ["b1", "b2", "b3", "b4"])


def bench_scene(items: list[str]) -> str:
    return f"bench: {', '.join(items)}; places: scrap bucket, tool chest, parts tray"


def clean(rng: random.Random) -> EvalTask:
    items = rng.sample(list(BENCH_PLACE), rng.randint(2, 4))
    return draft("clean", "normal", bench_scene(items), rng.choice(CLEAN),
                 "".join(carry(o, BENCH_PLACE[o]) for o in items), Placed(tuple((o, BENCH_PLACE[o]) for o in items)),
                 tuple(items))


def clean_trash(rng: random.Random) -> EvalTask:
    scraps = rng.sample(SCRAPS, rng.randint(1, 2))
    items = scraps + rng.sample(HAND_TOOLS + FASTENERS, rng.randint(1, 2))
    rng.shuffle(items)
    moved = [o for o in items if o in scraps]
    goal = Placed(tuple((o, "scrap bucket") for o in moved), tuple(o for o in items if o not in moved))
    return draft("clean_trash", "normal", bench_scene(items), rng.choice(SCRAPS_ONLY),
                 "".join(carry(o, "scrap bucket") for o in moved), goal, tuple(moved))


def bin_for(item: str) -> str:
    return "bread bin" if item in BREADS else "cheese box"


def counter_scene(items: list[str]) -> str:
    return f"counter: {', '.join(items)}; bins: bread bin, cheese box"


def sort(rng: random.Random) -> EvalTask:
    items = list(dict.fromkeys([rng.choice(BREADS), rng.choice(CHEESES)]
                               + rng.sample(BREADS + CHEESES, rng.randint(0, 2))))
    rng.shuffle(items)
    return draft("sort", "normal", counter_scene(items), rng.choice(SORT), "".join(carry(o, bin_for(o)) for o in items),
                 Placed(tuple((o, bin_for(o)) for o in items)), tuple(items))


def sort_only(rng: random.Random) -> EvalTask:
    bread = rng.random() < 0.5
    items = rng.sample(BREADS, rng.randint(1, 2)) + rng.sample(CHEESES, rng.randint(1, 2))
    rng.shuffle(items)
    moved = [o for o in items if (o in BREADS) == bread]
    goal = Placed(tuple((o, bin_for(o)) for o in moved), tuple(o for o in items if o not in moved))
    return draft("sort_only", "normal", counter_scene(items), rng.choice(SORT_BREAD if bread else SORT_CHEESE),
                 "".join(carry(o, bin_for(o)) for o in moved), goal, tuple(moved))


def into(rng: random.Random) -> EvalTask:
    two = rng.random() < 0.4
    objs = rng.sample(KITCHEN, 2 if two else 1)
    places = rng.sample(SPOTS, 2)
    table = objs + rng.sample([k for k in KITCHEN if k not in objs], rng.randint(1, 2))
    rng.shuffle(table)
    dests = places if two else places[:1]
    plan = "".join(f"sc({q(o)});" + carry(o, p) for o, p in zip(objs, dests))
    task = (rng.choice(INTO2).format(o=objs[0], p=places[0], o2=objs[1], p2=places[1]) if two
            else rng.choice(INTO1).format(o=objs[0], p=places[0]))
    return draft("place_into", "normal", f"table: {', '.join(table)}; places: {', '.join(places)}", task, plan,
                 Placed(tuple(zip(objs, dests))), tuple(objs) + tuple(dests))


def at(rng: random.Random) -> EvalTask:
    two = rng.random() < 0.4
    objs = rng.sample(KITCHEN, 2 if two else 1)
    coords = [(rng.randrange(5, 60, 5), rng.randrange(5, 60, 5)) for _ in objs]
    table = objs + rng.sample([k for k in KITCHEN if k not in objs], rng.randint(0, 2))
    rng.shuffle(table)
    plan = "".join(f"sc({q(o)});gt({q(o)});pi({q(o)});mv({x}, {y});dr();" for o, (x, y) in zip(objs, coords))
    if two:
        (x, y), (u, v) = coords
        task = rng.choice(AT2).format(o=objs[0], o2=objs[1], x=x, y=y, u=u, v=v)
    else:
        task = rng.choice(AT1).format(o=objs[0], x=coords[0][0], y=coords[0][1])
    goal = Placed(tuple((o, (float(x), float(y))) for o, (x, y) in zip(objs, coords)))
    return draft("place_at", "normal", f"table: {', '.join(table)}", task, plan, goal, tuple(objs), ("mv",))


def absent(rng: random.Random) -> EvalTask:
    """Stow or park a kitchen thing the table lacks: the scan finds none and the plan stops there."""
    return arm.absent(rng, KITCHEN, SPOTS, INTO1, AT1, (2, 3), 5)


KINDS: list[tuple[Callable[[random.Random], EvalTask], int]] = [
    (stack2, 5), (stack3, 6), (tower4, 5), (clean, 8), (clean_trash, 5), (sort, 7), (sort_only, 5), (into, 7),
    (at, 6), (absent, 6),
]
