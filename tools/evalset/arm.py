"""Arm tasks of the dev and test splits: word tables, phrasings, and one function per task kind writing a scene, a
task, its goal condition and its reference plan (the conventions are in HEADER, written at the top of
config/eval/arm.yaml). The heldout split has tables of its own (tools/evalset/heldout_arm.py)."""
from __future__ import annotations

import random
from typing import Callable

from timely_llm_ros.evaluation.evalset import EvalTask
from timely_llm_ros.evaluation.goals import GoalCondition, Missing, Placed

HEADER = """\
# Plan-quality evaluation set, arm (one skill call per statement, config/skills/arm.yaml). Written by
# tools/evalset/make_evalset.py from the tables of tools/evalset/arm.py (dev, test) and tools/evalset/heldout_arm.py
# (heldout): edit those and run it again rather than editing this file (test/test_evalset.py checks every plan).
# Fields as in drone.yaml; every goal is a placement: placed {object: where it ends (a name or [x, y] cm)} and
# unmoved [objects that stay where they are], or missing: X (X is not on the table: nothing may move).
# Reference plan conventions (the project's, as in the LRTrace traces 9-11):
#   pick and place X onto/into D:  gt('X');pi('X');gt('D');dr();
#   stacking:          sc() every block in the order the task names them, then bottom-up for each level above
#                      the base: pick and place it onto the level below.
#   desk cleaning:     every item (or only the trash) in scene order to its place: trash -> trash bin,
#                      stationery -> drawer, dishes -> tray.
#   produce sorting:   every item (or only the fruits / vegetables) in scene order to the fruit basket or the
#                      vegetable basket.
#   put X in P:        sc('X'); then pick and place X into P (for each object named, in task order).
#   move X to (x, y):  sc('X');gt('X');pi('X');mv(x, y);dr();  (for each object named, in task order).
#   an X the table lacks (kind absent, goal missing: X): sc('X'); the scan finds no X and the arm moves nothing.
"""


def q(text: str) -> str:
    return f"'{text}'"


def draft(kind: str, urgency: str, scene: str, task: str, plan: str, goal: GoalCondition, key_objects: tuple[str, ...] = (),
          key_skills: tuple[str, ...] = ()) -> EvalTask:
    """An arm task before make_evalset gives it its id and split."""
    return EvalTask(id="", robot_type="arm", kind=kind, split="", urgency=urgency, scene=scene, task=task, plan=plan,
                    key_objects=tuple(key_objects), key_skills=tuple(key_skills), goal=goal)


# ------------------------------------------------------------------ arm tables and phrasings
COLOURS = ["red", "blue", "green", "yellow", "orange", "purple", "white", "black", "pink", "gray", "brown", "silver"]
SHAPES = ["block", "cube", "cylinder", "brick"]
TRASH = ["paper", "wrapper", "tissue", "can", "banana peel", "receipt", "candy wrapper", "apple core", "bottle cap",
         "napkin"]
STATIONERY = ["pen", "pencil", "stapler", "notebook", "ruler", "eraser", "scissors", "marker", "glue stick",
              "highlighter"]
DISHES = ["cup", "mug", "plate", "spoon", "glass", "bowl", "fork", "saucer", "teacup"]
DESK_PLACE = {**{t: "trash bin" for t in TRASH}, **{s: "drawer" for s in STATIONERY}, **{d: "tray" for d in DISHES}}
FRUITS = ["apple", "banana", "orange", "pear", "lemon", "grape", "peach", "mango", "kiwi", "plum", "cherry", "lime",
          "fig", "apricot", "pineapple", "raspberry", "nectarine", "grapefruit", "melon", "strawberry"]
VEGETABLES = ["carrot", "potato", "onion", "broccoli", "lettuce", "garlic", "cabbage", "celery", "radish", "spinach",
              "leek", "beet", "turnip", "asparagus", "cauliflower", "kale", "parsnip"]
ITEMS = ["sponge", "mug", "toy car", "book", "red cube", "blue cylinder", "apple", "lemon", "stapler", "bottle",
         "tennis ball", "remote", "soap", "brush", "screwdriver", "green block"]
CONTAINERS = ["box", "bin", "drawer", "shelf", "tray", "sink", "cupboard", "basket"]

STACK2 = ["put the {top} on top of the {base}", "set the {top} onto the {base}", "on the {base}, place the {top}",
          "I want the {top} resting on the {base}", "lift the {top} and drop it onto the {base}"]
STACK3 = ["stack the {middle} on the {bottom}, then put the {top} on the {middle}",
          "build a three-block stack: {bottom} first, {middle} on it, {top} last",
          "I want the {top} on top, the {middle} under it and the {bottom} at the base",
          "pile the blocks up with the {bottom} lowest, the {middle} next and the {top} highest",
          "put the {middle} onto the {bottom} and finish with the {top} on the {middle}",
          "starting from the {bottom}, stack the {middle} and then the {top}"]
TOWER4 = ["make a four-block tower from the {b1} up: {b2}, {b3}, then {b4}",
          "stack four blocks, bottom to top: {b1}, {b2}, {b3}, {b4}",
          "build a tall tower: {b4} on top of {b3}, which sits on {b2}, which sits on {b1}"]
CLEAN_ALL = ["the desk is a mess, put things where they belong", "clear everything off the desk",
             "put the desk items away properly", "organize my desk", "get the desk cleaned up",
             "tidy the workspace, putting each item in its place"]
CLEAN_TRASH = ["throw away the rubbish on the desk", "bin the trash on my desk",
               "put only the garbage in the trash bin", "get rid of the litter on the desk, leave the rest"]
SORT_ALL = ["put each fruit and vegetable in the right basket", "sort the produce into the two baskets",
            "the groceries need sorting: fruit in one basket, veggies in the other",
            "separate the produce by kind into the baskets", "organize the fruit and veg into their baskets"]
SORT_FRUIT = ["put the fruits into the fruit basket, leave the rest", "move only the fruit to its basket"]
SORT_VEG = ["move only the vegetables into the vegetable basket", "put the veggies in their basket, nothing else"]
INTO1 = ["drop the {o} in the {p}", "move the {o} over to the {p}", "could you put the {o} inside the {p}?",
         "the {o} belongs in the {p}, put it there", "transfer the {o} to the {p}"]
INTO2 = ["put the {o} in the {p} and the {o2} in the {p2}", "the {o} goes to the {p}, the {o2} to the {p2}"]
AT1 = ["slide the {o} to position ({x}, {y})", "set the {o} down at x {x}, y {y}", "move the {o} to the point {x}, {y}"]
AT2 = ["relocate the {o} to {x}, {y} and then the {o2} to {u}, {v}",
       "first put the {o} at ({x}, {y}), then the {o2} at ({u}, {v})"]


# ------------------------------------------------------------------ arm kinds
def pick_place(obj: str, dest: str) -> str:
    return f"gt({q(obj)});pi({q(obj)});gt({q(dest)});dr();"


def mention_order(template: str, values: dict[str, str]) -> list[str]:
    """The values in the order the template names them (the blocks are scanned in the order the task says)."""
    slots = sorted(values, key=lambda name: template.index("{" + name + "}"))
    return [values[s] for s in slots]


def blocks(rng: random.Random, n: int) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        block = f"{rng.choice(COLOURS)} {rng.choice(SHAPES)}"
        if block not in out:
            out.append(block)
    return out


def stack(rng: random.Random, kind: str, phrases: list[str], slots: list[str]) -> EvalTask:
    """Blocks bottom-up in ``slots`` order: scan each in the order the task names them, then place each level."""
    chosen = blocks(rng, len(slots) + rng.randint(0, 2))
    levels, distractors = chosen[:len(slots)], chosen[len(slots):]
    template = rng.choice(phrases)
    values = dict(zip(slots, levels))
    table = levels + distractors
    rng.shuffle(table)
    plan = "".join(f"sc({q(b)});" for b in mention_order(template, values))
    plan += "".join(pick_place(upper, lower) for lower, upper in zip(levels, levels[1:]))
    goal = Placed(tuple((upper, lower) for lower, upper in zip(levels, levels[1:])))
    return draft(kind, "normal", f"table: {', '.join(table)}", template.format(**values), plan, goal, tuple(levels))


def arm_stack2(rng: random.Random) -> EvalTask:
    return stack(rng, "stack2", STACK2, ["base", "top"])


def arm_stack3(rng: random.Random) -> EvalTask:
    return stack(rng, "stack3", STACK3, ["bottom", "middle", "top"])


def arm_tower4(rng: random.Random) -> EvalTask:
    return stack(rng, "tower4", TOWER4, ["b1", "b2", "b3", "b4"])


def desk_scene(items: list[str]) -> str:
    return f"desk: {', '.join(items)}; places: trash bin, drawer, tray"


def arm_clean(rng: random.Random) -> EvalTask:
    items = rng.sample(list(DESK_PLACE), rng.randint(2, 4))
    plan = "".join(pick_place(o, DESK_PLACE[o]) for o in items)
    return draft("clean", "normal", desk_scene(items), rng.choice(CLEAN_ALL), plan,
                 Placed(tuple((o, DESK_PLACE[o]) for o in items)), tuple(items))


def arm_clean_trash(rng: random.Random) -> EvalTask:
    trash = rng.sample(TRASH, rng.randint(1, 2))
    items = trash + rng.sample(STATIONERY + DISHES, rng.randint(1, 2))
    rng.shuffle(items)
    moved = [o for o in items if o in trash]
    plan = "".join(pick_place(o, "trash bin") for o in moved)
    goal = Placed(tuple((o, "trash bin") for o in moved), tuple(o for o in items if o not in moved))
    return draft("clean_trash", "normal", desk_scene(items), rng.choice(CLEAN_TRASH), plan, goal, tuple(moved))


def produce_scene(items: list[str]) -> str:
    return f"table: {', '.join(items)}; baskets: fruit basket, vegetable basket"


def basket(item: str) -> str:
    return "fruit basket" if item in FRUITS else "vegetable basket"


def arm_sort(rng: random.Random) -> EvalTask:
    items = [rng.choice(FRUITS), rng.choice(VEGETABLES)] + rng.sample(FRUITS + VEGETABLES, rng.randint(0, 2))
    items = list(dict.fromkeys(items))
    rng.shuffle(items)
    plan = "".join(pick_place(o, basket(o)) for o in items)
    return draft("sort", "normal", produce_scene(items), rng.choice(SORT_ALL), plan,
                 Placed(tuple((o, basket(o)) for o in items)), tuple(items))


def arm_sort_only(rng: random.Random) -> EvalTask:
    fruit = rng.random() < 0.5
    items = rng.sample(FRUITS, rng.randint(1, 2)) + rng.sample(VEGETABLES, rng.randint(1, 2))
    rng.shuffle(items)
    moved = [o for o in items if (o in FRUITS) == fruit]
    plan = "".join(pick_place(o, basket(o)) for o in moved)
    goal = Placed(tuple((o, basket(o)) for o in moved), tuple(o for o in items if o not in moved))
    return draft("sort_only", "normal", produce_scene(items), rng.choice(SORT_FRUIT if fruit else SORT_VEG), plan,
                 goal, tuple(moved))


def arm_into(rng: random.Random) -> EvalTask:
    two = rng.random() < 0.35
    objs = rng.sample(ITEMS, 2 if two else 1)
    places = rng.sample(CONTAINERS, 2)
    table = objs + rng.sample([i for i in ITEMS if i not in objs], rng.randint(1, 2))
    rng.shuffle(table)
    scene = f"table: {', '.join(table)}; places: {', '.join(places)}"
    dests = places if two else places[:1]
    plan = "".join(f"sc({q(o)});" + pick_place(o, p) for o, p in zip(objs, dests))
    task = (rng.choice(INTO2).format(o=objs[0], p=places[0], o2=objs[1], p2=places[1]) if two
            else rng.choice(INTO1).format(o=objs[0], p=places[0]))
    return draft("place_into", "normal", scene, task, plan, Placed(tuple(zip(objs, dests))),
                 tuple(objs) + tuple(dests))


def arm_at(rng: random.Random) -> EvalTask:
    two = rng.random() < 0.45
    objs = rng.sample(ITEMS, 2 if two else 1)
    coords = [(rng.randrange(0, 60, 5), rng.randrange(0, 60, 5)) for _ in objs]
    table = objs + rng.sample([i for i in ITEMS if i not in objs], rng.randint(0, 2))
    rng.shuffle(table)
    plan = "".join(f"sc({q(o)});gt({q(o)});pi({q(o)});mv({x}, {y});dr();" for o, (x, y) in zip(objs, coords))
    if two:
        (x, y), (u, v) = coords
        task = rng.choice(AT2).format(o=objs[0], o2=objs[1], x=x, y=y, u=u, v=v)
    else:
        task = rng.choice(AT1).format(o=objs[0], x=coords[0][0], y=coords[0][1])
    goal = Placed(tuple((o, (float(x), float(y))) for o, (x, y) in zip(objs, coords)))
    return draft("place_at", "normal", f"table: {', '.join(table)}", task, plan, goal, tuple(objs), ("mv",))


def absent(rng: random.Random, items: list[str], places: list[str], into: list[str], at: list[str],
           others: tuple[int, int], low: int) -> EvalTask:
    """Put (into one of ``places``) or move (to a point of at least ``low`` cm) one of ``items`` that the table
    lacks, the table holding ``others`` of the rest: the scan finds no such object and the plan stops there."""
    obj = rng.choice(items)
    table = rng.sample([i for i in items if i != obj], rng.randint(*others))
    if rng.random() < 0.6:
        place = rng.choice(places)
        scene, task = f"table: {', '.join(table)}; places: {place}", rng.choice(into).format(o=obj, p=place)
    else:
        x, y = rng.randrange(low, 60, 5), rng.randrange(low, 60, 5)
        scene, task = f"table: {', '.join(table)}", rng.choice(at).format(o=obj, x=x, y=y)
    return draft("absent", "normal", scene, task, f"sc({q(obj)});", Missing(obj), (obj,))


def arm_absent(rng: random.Random) -> EvalTask:
    return absent(rng, ITEMS, CONTAINERS, INTO1, AT1, (2, 4), 0)


KINDS: list[tuple[Callable[[random.Random], EvalTask], int]] = [
    (arm_stack2, 10), (arm_stack3, 22), (arm_tower4, 10), (arm_clean, 26), (arm_clean_trash, 14), (arm_sort, 26),
    (arm_sort_only, 14), (arm_into, 18), (arm_at, 16), (arm_absent, 9),
]
