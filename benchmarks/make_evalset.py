#!/usr/bin/env python3
"""Write the plan-quality evaluation set (config/eval/drone.yaml, config/eval/arm.yaml) from the tables below.

    python benchmarks/make_evalset.py            # write both files, print the overlap with the training corpus
    python benchmarks/make_evalset.py --overlap  # only print the overlap of the committed files

A task kind is a list of phrasings, a scene drawn from word tables and a rule writing the reference plan in the
project's plan conventions (each file's header states them). The phrasings are the project's own and none is a
template of the embedded planner's corpus (timely_llm_ros/model/corpus.py); ``overlap`` measures that, and
test/test_evalset.py keeps it at zero. Within each kind every third task (the first, fourth, ...) is ``dev``, the
rest ``test``. Deterministic: the same tables and seed write the same files.
"""
from __future__ import annotations

import argparse
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from timely_llm_ros.core.evalset import EvalTask, eval_dir, load_eval_tasks  # noqa: E402
from timely_llm_ros.core.plan_checks import string_arguments  # noqa: E402

SEED = 30
AN = re.compile(r"\b([Aa]) ([aeiou])")   # "a umbrella" -> "an umbrella"

# ------------------------------------------------------------------ drone tables
ROOMS = ["living room", "kitchen", "bedroom", "office", "garage", "dining room", "laundry room", "nursery",
         "workshop", "playroom", "library", "porch", "hallway", "pantry", "studio"]
THINGS = ["cat", "house key", "wallet", "phone", "glasses case", "remote", "book", "toy", "cup", "umbrella", "laptop",
          "watch", "backpack", "charger", "hairbrush", "tablet", "scarf", "slipper", "earbud case", "passport",
          "hamster", "parrot", "frisbee", "thermos", "lunchbox", "rubber duck", "game controller", "water bottle",
          "baseball cap", "paintbrush", "puppy", "kitten", "key ring", "coin purse"]
FILLERS = ["rug", "window", "door", "painting", "tv", "mirror", "curtain", "bookcase", "armchair", "piano",
           "fireplace", "plant", "fan", "radiator", "clock", "vase"]
# how far the drone descends to look under a piece of furniture (cm)
UNDER = {"bed": 60, "sofa": 50, "table": 80, "desk": 70, "chair": 40, "dresser": 100, "bench": 40, "couch": 50,
         "crib": 70, "nightstand": 60, "coffee table": 45, "workbench": 90}
SURFACES = ["table", "desk", "shelf", "counter", "cabinet", "dresser", "nightstand", "bench", "coffee table",
            "windowsill", "piano", "workbench"]
BEHIND = ["sofa", "couch", "cabinet", "bookcase", "armchair", "dresser", "tv", "curtain", "fridge", "door"]
PURPOSES = {
    "cutting paper": ["scissors", "knife", "box cutter"],
    "hammering a nail": ["hammer", "mallet"],
    "measuring a shelf": ["tape measure", "ruler"],
    "watering the plants": ["watering can", "jug", "hose"],
    "tying up a parcel": ["string", "rope", "tape"],
    "wiping the table": ["cloth", "sponge", "towel"],
    "reading in the dark": ["flashlight", "lamp", "candle"],
    "eating soup": ["spoon", "bowl"],
    "drying my hands": ["towel", "napkin"],
    "writing a note": ["pen", "pencil", "marker"],
    "carrying books": ["bag", "backpack", "box"],
}
PEOPLE = ["toddler", "child", "jogger", "elderly man", "woman", "delivery worker", "cyclist", "nurse", "boy", "girl",
          "person", "visitor"]
STATIC_OBSTACLES = ["pillar", "lamp post", "fence", "bookcase", "wall", "tree", "hanging plant", "beam", "cable",
                    "shelf"]
MOVING_OBSTACLES = ["forklift", "swinging door", "robot vacuum", "drone", "ceiling fan", "ball", "car"]
FLYING_ANIMALS = ["pigeon", "seagull", "hornet", "owl", "bird", "bee", "bat", "crow"]
GROUND_ANIMALS = ["dog", "fox", "raccoon", "goat", "cat", "squirrel"]
AWAY = {"in front": "mb", "behind": "mf", "on the left": "mr", "on the right": "ml", "above": "md", "below": "mu"}
NUMBER_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 8: "eight"}

# ------------------------------------------------------------------ drone phrasings
FIND = ["I can't find my {o}, can you spot it?", "have you seen the {o} anywhere?", "scout the room for the {o}",
        "try to spot a {o}", "where did I leave my {o}?", "hunt for the {o} please",
        "fly around until you see the {o}", "the {o} went missing, track it down",
        "see whether there's a {o} in here", "spot the {o} and photograph it"]
TWO = ["do you see my {a} or my {b} anywhere?", "I need either my {a} or my {b}, check for them",
       "look around: is there a {a} or a {b}?", "find whichever is here, the {a} or the {b}",
       "check if the {a} or the {b} is in this room", "spot a {a} or a {b} for me"]
ON = ["is there a {o} sitting on the {f}?", "fly to the {f} and see if the {o} is there",
      "go check whether my {o} was left on the {f}", "did I put the {o} on the {f}?",
      "verify that the {o} is on top of the {f}", "take a look at the {f}: is the {o} there?"]
UNDER_PHRASES = ["peek under the {f} for my {o}", "my {o} rolled under the {f}, find it",
                 "is the {o} hiding beneath the {f}?", "check beneath the {f} for a {o}",
                 "look underneath the {f} to find the {o}"]
BEHIND_PHRASES = ["look behind the {f} for the {o}", "is my {o} behind the {f}?",
                  "check the space behind the {f} for a {o}", "the {o} fell behind the {f}, find it"]
PURPOSE_PHRASES = ["is there anything here I could use for {p}?", "look for an item suitable for {p}",
                   "which object here would help with {p}?", "spot something useful for {p}",
                   "find me a tool that is good for {p}", "help me find what I need for {p}"]
INJURY = ["careful, the {t} is very close, back off", "don't hurt the {t}, keep your distance",
          "you are about to hit the {t}, move away now", "the {t} is right next to you, stay clear",
          "danger: {t} nearby, get away from them"]
COLLISION = ["watch out for the {t}, don't crash", "you are heading into the {t}, steer clear",
             "don't collide with the {t}", "the {t} blocks your way, get out of its way",
             "brace yourself, the {t} is right there: avoid it"]
EVADE = ["a {t} is diving at you, get clear", "shake off the {t}", "get away from the angry {t}",
         "the {t} is chasing you, flee", "dodge the {t} quickly"]
APPROACH = ["fly to the {o} only if it is more than {n} cm from you, then take a photo",
            "when the {o} is farther than {n} cm, head over to it; then take a picture",
            "if you are over {n} cm from the {o}, move to it, and snap a photo either way"]
PHOTOS = ["rotate a full circle, snapping {k} photos", "take {k} pictures while spinning around once",
          "spin in place and shoot {k} evenly spaced photos"]
SQUARE = ["patrol a square path with {n} cm sides", "trace a square, each side {n} cm long"]
SHUTTLE = ["fly {n} cm forward and back, {k} times", "go forward {n} cm and return, repeat that {k} times"]

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


@dataclass(frozen=True)
class Draft:
    """A task before it gets its id and split."""

    kind: str
    urgency: str
    scene: str
    task: str
    plan: str
    key_objects: tuple[str, ...] = ()
    key_skills: tuple[str, ...] = ()


def q(text: str) -> str:
    return f"'{text}'"


def room_scene(rng: random.Random, must: list[str], pool: list[str], extra: int, absent: tuple[str, ...] = ()) -> str:
    """'room: R; objects: ...' with ``must`` among ``extra`` others from ``pool`` (none of ``absent``), shuffled."""
    others = [o for o in pool if o not in must and o not in absent]
    objects = must + rng.sample(others, extra)
    rng.shuffle(objects)
    return f"room: {rng.choice(ROOMS)}; objects: {', '.join(objects)}"


def look_block(obj: str, visible: bool, ret: str) -> str:
    """Go to a visible object (or scan for it first) and photograph it: the find convention."""
    body = f"?iv({q(obj)})==True{{g({q(obj)});tp();->{q(ret)};}}"
    return body if visible else f"s({q(obj)});{body}"


# ------------------------------------------------------------------ drone kinds
def drone_find(rng: random.Random) -> Draft:
    obj, visible = rng.choice(THINGS), rng.random() < 0.4
    scene = room_scene(rng, [obj] if visible else [], FILLERS + THINGS, rng.randint(2, 4), (obj,))
    plan = f"g({q(obj)});tp();->{q('found')};" if visible else look_block(obj, False, "found") + f"->{q('not found')};"
    return Draft("find", "normal", scene, rng.choice(FIND).format(o=obj), plan, (obj,))


def drone_two(rng: random.Random) -> Draft:
    a, b = rng.sample(THINGS, 2)
    seen = [o for o in (a, b) if rng.random() < 0.4]
    scene = room_scene(rng, seen, FILLERS + THINGS, rng.randint(2, 3), (a, b))
    plan = "".join(look_block(o, o in seen, o) for o in (a, b)) + f"->{q('none')};"
    return Draft("either", "normal", scene, rng.choice(TWO).format(a=a, b=b), plan, (a, b))


def drone_on(rng: random.Random) -> Draft:
    obj, furn = rng.choice(THINGS), rng.choice(SURFACES)
    scene = room_scene(rng, [furn], FILLERS, rng.randint(2, 4))
    plan = f"g({q(furn)});?iv({q(obj)})==True{{tp();->{q('yes')};}}->{q('no')};"
    return Draft("on", "normal", scene, rng.choice(ON).format(o=obj, f=furn), plan, (obj, furn))


def drone_under(rng: random.Random) -> Draft:
    obj, furn = rng.choice(THINGS), rng.choice(list(UNDER))
    scene = room_scene(rng, [furn], FILLERS, rng.randint(2, 4))
    plan = (f"g({q(furn)});md({UNDER[furn]});s({q(obj)});"
            f"?iv({q(obj)})==True{{tp();->{q('found')};}}->{q('not found')};")
    return Draft("under", "normal", scene, rng.choice(UNDER_PHRASES).format(o=obj, f=furn), plan, (obj, furn))


def drone_behind(rng: random.Random) -> Draft:
    obj, furn = rng.choice(THINGS), rng.choice(BEHIND)
    scene = room_scene(rng, [furn], FILLERS, rng.randint(2, 4), (furn,))
    plan = (f"g({q(furn)});mr(100);mf(100);tu(90);s({q(obj)});"
            f"?iv({q(obj)})==True{{tp();->{q('found')};}}->{q('not found')};")
    return Draft("behind", "normal", scene, rng.choice(BEHIND_PHRASES).format(o=obj, f=furn), plan, (obj, furn))


def drone_purpose(rng: random.Random) -> Draft:
    purpose = rng.choice(list(PURPOSES))
    tools = PURPOSES[purpose]
    present = [t for t in tools if rng.random() < 0.4]
    any_tool = {t for ts in PURPOSES.values() for t in ts}
    pool = [o for o in FILLERS + THINGS if o not in any_tool]
    others = rng.sample(pool, rng.randint(2, 3))
    objects = present + others
    rng.shuffle(objects)
    scene = f"room: {rng.choice(ROOMS)}; objects: {', '.join(objects)}"
    chosen = next((o for o in objects if o in tools), None)
    task = rng.choice(PURPOSE_PHRASES).format(p=purpose)
    if chosen is not None:
        return Draft("purpose", "normal", scene, task, f"g({q(chosen)});tp();->{q(chosen)};", (chosen,))
    return Draft("purpose", "normal", scene, task, f"sa({q('what can be used for ' + purpose + '?')});rp();",
                 key_skills=("sa",))


def urgent(kind: str, phrases: list[str], thing: str, rng: random.Random, second: Callable[[bool], str]) -> Draft:
    direction, dist = rng.choice(list(AWAY)), rng.choice(range(30, 200, 10))
    away = AWAY[direction]
    vertical = direction in ("above", "below")
    move = f"{away}({80 if dist < 100 else 50});"
    plan = second(vertical).replace("{away}", move)
    return Draft(kind, "urgent", f"{thing} {direction}, {dist} cm away", rng.choice(phrases).format(t=thing), plan,
                 key_skills=(away,))


def sidestep(vertical: bool) -> str:
    """The second evasive move: sideways after a vertical escape, up after a horizontal one."""
    return "{away}" + ("mr(40);" if vertical else "mu(40);")


def drone_injury(rng: random.Random) -> Draft:
    return urgent("injury", INJURY, rng.choice(PEOPLE), rng, sidestep)


def drone_collision(rng: random.Random) -> Draft:
    thing = rng.choice(STATIC_OBSTACLES + MOVING_OBSTACLES)
    if thing in MOVING_OBSTACLES:   # a moving obstacle: wait a second for it to pass, then move away
        return urgent("collision", COLLISION, thing, rng, lambda vertical: "d(1);{away}")
    return urgent("collision", COLLISION, thing, rng, sidestep)


def drone_evade(rng: random.Random) -> Draft:
    thing = rng.choice(FLYING_ANIMALS + GROUND_ANIMALS)
    if thing in FLYING_ANIMALS:     # a flier follows upwards: the second move goes left or down
        return urgent("evade", EVADE, thing, rng, lambda vertical: "{away}" + ("ml(40);" if vertical else "md(40);"))
    return urgent("evade", EVADE, thing, rng, sidestep)


def drone_approach(rng: random.Random) -> Draft:
    obj, n = rng.choice(THINGS), rng.choice(range(60, 310, 20))
    scene = room_scene(rng, [obj], FILLERS, rng.randint(1, 3))
    plan = f"_1=od({q(obj)});?_1>{n}{{g({q(obj)});}}tp();"
    return Draft("approach", "normal", scene, rng.choice(APPROACH).format(o=obj, n=n), plan, (obj,), ("od",))


def drone_loop(rng: random.Random) -> Draft:
    scene = f"room: {rng.choice(ROOMS)}; objects: {', '.join(rng.sample(FILLERS, 2))}"
    shape = rng.choice(["photos", "photos", "square", "shuttle"])
    if shape == "photos":
        k = rng.choice([3, 4, 5, 6, 8])
        return Draft("loop", "normal", scene, rng.choice(PHOTOS).format(k=NUMBER_WORDS.get(k, str(k))),
                     f"{k}{{tc({360 // k});tp();}}", key_skills=("tc", "tp"))
    n = rng.choice(range(40, 210, 20))
    if shape == "square":
        return Draft("loop", "normal", scene, rng.choice(SQUARE).format(n=n), f"4{{mf({n});tc(90);}}",
                     key_skills=("mf", "tc"))
    k = rng.choice([2, 3, 4])
    return Draft("loop", "normal", scene, rng.choice(SHUTTLE).format(n=n, k=NUMBER_WORDS[k]),
                 f"{k}{{mf({n});mb({n});}}", key_skills=("mf", "mb"))


DRONE_KINDS: list[tuple[Callable[[random.Random], Draft], int]] = [
    (drone_find, 24), (drone_two, 20), (drone_on, 18), (drone_under, 15), (drone_behind, 10), (drone_purpose, 21),
    (drone_injury, 13), (drone_collision, 13), (drone_evade, 13), (drone_approach, 8), (drone_loop, 10),
]


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


def stack(rng: random.Random, kind: str, phrases: list[str], slots: list[str]) -> Draft:
    """Blocks bottom-up in ``slots`` order: scan each in the order the task names them, then place each level."""
    chosen = blocks(rng, len(slots) + rng.randint(0, 2))
    levels, distractors = chosen[:len(slots)], chosen[len(slots):]
    template = rng.choice(phrases)
    values = dict(zip(slots, levels))
    table = levels + distractors
    rng.shuffle(table)
    plan = "".join(f"sc({q(b)});" for b in mention_order(template, values))
    plan += "".join(pick_place(upper, lower) for lower, upper in zip(levels, levels[1:]))
    return Draft(kind, "normal", f"table: {', '.join(table)}", template.format(**values), plan, tuple(levels))


def arm_stack2(rng: random.Random) -> Draft:
    return stack(rng, "stack2", STACK2, ["base", "top"])


def arm_stack3(rng: random.Random) -> Draft:
    return stack(rng, "stack3", STACK3, ["bottom", "middle", "top"])


def arm_tower4(rng: random.Random) -> Draft:
    return stack(rng, "tower4", TOWER4, ["b1", "b2", "b3", "b4"])


def desk_scene(items: list[str]) -> str:
    return f"desk: {', '.join(items)}; places: trash bin, drawer, tray"


def arm_clean(rng: random.Random) -> Draft:
    items = rng.sample(list(DESK_PLACE), rng.randint(2, 4))
    plan = "".join(pick_place(o, DESK_PLACE[o]) for o in items)
    return Draft("clean", "normal", desk_scene(items), rng.choice(CLEAN_ALL), plan, tuple(items))


def arm_clean_trash(rng: random.Random) -> Draft:
    trash = rng.sample(TRASH, rng.randint(1, 2))
    items = trash + rng.sample(STATIONERY + DISHES, rng.randint(1, 2))
    rng.shuffle(items)
    moved = [o for o in items if o in trash]
    plan = "".join(pick_place(o, "trash bin") for o in moved)
    return Draft("clean_trash", "normal", desk_scene(items), rng.choice(CLEAN_TRASH), plan, tuple(moved))


def produce_scene(items: list[str]) -> str:
    return f"table: {', '.join(items)}; baskets: fruit basket, vegetable basket"


def basket(item: str) -> str:
    return "fruit basket" if item in FRUITS else "vegetable basket"


def arm_sort(rng: random.Random) -> Draft:
    items = [rng.choice(FRUITS), rng.choice(VEGETABLES)] + rng.sample(FRUITS + VEGETABLES, rng.randint(0, 2))
    items = list(dict.fromkeys(items))
    rng.shuffle(items)
    plan = "".join(pick_place(o, basket(o)) for o in items)
    return Draft("sort", "normal", produce_scene(items), rng.choice(SORT_ALL), plan, tuple(items))


def arm_sort_only(rng: random.Random) -> Draft:
    fruit = rng.random() < 0.5
    items = rng.sample(FRUITS, rng.randint(1, 2)) + rng.sample(VEGETABLES, rng.randint(1, 2))
    rng.shuffle(items)
    moved = [o for o in items if (o in FRUITS) == fruit]
    plan = "".join(pick_place(o, basket(o)) for o in moved)
    return Draft("sort_only", "normal", produce_scene(items), rng.choice(SORT_FRUIT if fruit else SORT_VEG), plan,
                 tuple(moved))


def arm_into(rng: random.Random) -> Draft:
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
    return Draft("place_into", "normal", scene, task, plan, tuple(objs) + tuple(dests))


def arm_at(rng: random.Random) -> Draft:
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
    return Draft("place_at", "normal", f"table: {', '.join(table)}", task, plan, tuple(objs), ("mv",))


ARM_KINDS: list[tuple[Callable[[random.Random], Draft], int]] = [
    (arm_stack2, 10), (arm_stack3, 22), (arm_tower4, 10), (arm_clean, 26), (arm_clean_trash, 14), (arm_sort, 26),
    (arm_sort_only, 14), (arm_into, 18), (arm_at, 16),
]

HEADER = {
    "drone": """\
# Plan-quality evaluation set, drone (MiniSpec, config/skills/drone.yaml). Written by benchmarks/make_evalset.py:
# edit its tables and run it again rather than editing this file (test/test_evalset.py checks every plan).
# Fields: id, kind, split (dev: the only tasks to look at while choosing prompts or examples; test: the rest),
# urgency (class the request is sent with), scene (the context the planner sees), task, plan (the reference),
# key_objects (each must be a string argument of a call in the plan), key_skills (each must be called).
# Reference plan conventions (the project's, as in the LRTrace traces 1-8):
#   find X:            X in the scene: g('X');tp();->'found';
#                      else: s('X');?iv('X')==True{g('X');tp();->'found';}->'not found';
#   either A or B:     for A: s('A'); (left out when A is in the scene) ?iv('A')==True{g('A');tp();->'A';}
#                      then the same for B, then ->'none';
#   X on F:            g('F');?iv('X')==True{tp();->'yes';}->'no';
#   X under F:         g('F');md(H);s('X');?iv('X')==True{tp();->'found';}->'not found';   H: F's clearance (cm)
#   X behind F:        g('F');mr(100);mf(100);tu(90);s('X');... as under (go round its right side, face behind it)
#   tool for P:        the first tool for P in the scene order: g('T');tp();->'T';
#                      none in the scene: sa('what can be used for P?');rp();
#   urgent (traces 6-8): move away from the hazard (in front: mb, behind: mf, left: mr, right: ml, above: md,
#                      below: mu), 80 cm when it is closer than 100 cm, else 50 cm; then a second move of 40 cm: up
#                      (mu) after a horizontal escape, right (mr) after a vertical one; a flying animal: down (md)
#                      or left (ml) instead; a moving obstacle: d(1) first, then the one move away.
#   approach:          _1=od('X');?_1>N{g('X');}tp();
#   loops:             k photos around: k{tc(360/k);tp();}   square: 4{mf(N);tc(90);}   shuttle: k{mf(N);mb(N);}
""",
    "arm": """\
# Plan-quality evaluation set, arm (one skill call per statement, config/skills/arm.yaml). Written by
# benchmarks/make_evalset.py: edit its tables and run it again rather than editing this file
# (test/test_evalset.py checks every plan). Fields as in drone.yaml.
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
""",
}


def draft_tasks(robot_type: str, seed: int = SEED) -> list[EvalTask]:
    """Every task of a robot type: each kind's drafts in order, ids numbered per kind, every third one dev."""
    kinds = DRONE_KINDS if robot_type == "drone" else ARM_KINDS
    rng = random.Random(f"{seed}:{robot_type}")
    out: list[EvalTask] = []
    for make, count in kinds:
        seen: set[tuple[str, str]] = set()
        drafts: list[Draft] = []
        while len(drafts) < count:       # no two tasks of a kind with the same scene and text
            d = make(rng)
            if (d.scene, d.task) not in seen:
                seen.add((d.scene, d.task))
                drafts.append(d)
        for i, d in enumerate(drafts):
            out.append(EvalTask(id=f"{robot_type}-{d.kind}-{i:03d}", robot_type=robot_type, kind=d.kind,
                                split="dev" if i % 3 == 0 else "test", urgency=d.urgency, scene=d.scene,
                                task=AN.sub(r"\1n \2", d.task), plan=d.plan, key_objects=d.key_objects,
                                key_skills=d.key_skills))
    return out


def write(robot_type: str, tasks: list[EvalTask], directory: Path) -> Path:
    entries = [{"id": t.id, "kind": t.kind, "split": t.split, "urgency": t.urgency, "scene": t.scene, "task": t.task,
                "plan": t.plan, "key_objects": list(t.key_objects), "key_skills": list(t.key_skills)} for t in tasks]
    body = yaml.safe_dump({"robot_type": robot_type, "tasks": entries}, sort_keys=False, width=200,
                          default_flow_style=None, allow_unicode=True)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{robot_type}.yaml"
    path.write_text(HEADER[robot_type] + body, encoding="utf-8")
    return path


# ------------------------------------------------------------------ overlap with the training corpus
def _template_regex(template: str) -> re.Pattern:
    parts = re.split(r"\{\w+\}", template)
    return re.compile(r"(?<!\w)" + "(.+?)".join(re.escape(p) for p in parts) + r"(?!\w)", re.I)


def corpus_templates() -> list[str]:
    """Every task template of the embedded planner's corpus: its phrasing lists and its inline motion tasks."""
    from timely_llm_ros.model import corpus

    lists = ["FIND", "CHECK_TWO", "ON_FURN", "UNDER_FURN", "PURPOSE", "APPROACH", "PROBE", "INJURY", "COLLISION",
             "EVADE", "STACK", "TOWER", "CLEAN", "CLASSIFY", "MOVE_TO", "GREETINGS", "SEE", "IS_THERE"]
    inline = ["move forward {n} cm and turn {side} {d} degrees", "fly {dir} {n} cm then take a picture",
              "fly a square with {n} cm sides", "turn around and take {k} pictures",
              "move {side} {n} cm, wait {s} seconds and come back", "what can you do?"]
    return [t for name in lists for t in getattr(corpus, name)] + inline


@dataclass(frozen=True)
class Overlap:
    """How the evaluation tasks relate to the embedded planner's training corpus."""

    n: int
    template: list[str]          # ids whose task text is a corpus template with its slots filled
    contains_template: list[str]  # ids whose task text contains one (e.g. "... and look for the cat ...")
    verbatim: list[str]          # ids whose task text occurs in a 50,000-example corpus sample
    new_key_objects: float       # share of the distinct key objects the corpus never names


def overlap(tasks: list[EvalTask], sample: int = 50_000) -> Overlap:
    """Measure the overlap of ``tasks`` with the corpus (template matches, verbatim texts, object vocabulary)."""
    from timely_llm_ros.model import corpus

    patterns = [_template_regex(t) for t in corpus_templates()]
    examples = corpus.generate(sample, seed=0)
    texts = {e.task.lower() for e in examples}
    vocabulary = {a.lower() for e in examples for a in string_arguments(e.plan)}
    vocabulary |= {w.strip().lower() for e in examples for part in e.context.split(";")
                   for w in part.split(":")[-1].split(",")}
    template = [t.id for t in tasks if any(p.fullmatch(t.task) for p in patterns)]
    contains = [t.id for t in tasks if any(p.search(t.task) for p in patterns)]
    verbatim = [t.id for t in tasks if t.task.lower() in texts]
    keys = {k for t in tasks for k in t.key_objects}
    new = [k for k in keys if k.lower() not in vocabulary]
    return Overlap(len(tasks), template, contains, verbatim, len(new) / max(1, len(keys)))


def report_overlap(tasks: list[EvalTask]) -> None:
    o = overlap(tasks)
    print(f"overlap with the embedded planner's corpus over {o.n} tasks: {len(o.template)} are a corpus template, "
          f"{len(o.contains_template)} contain one, {len(o.verbatim)} occur verbatim in 50,000 corpus examples; "
          f"{o.new_key_objects:.0%} of the distinct key objects never occur in the corpus")
    for label, ids in (("template", o.template), ("contains a template", o.contains_template)):
        if ids:
            by_id = {t.id: t for t in tasks}
            print(f"  {label}: " + "; ".join(f"{i}: {by_id[i].task!r}" for i in ids[:10]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--overlap", action="store_true", help="only report the committed files' overlap")
    ap.add_argument("--out", type=Path, default=None, help="folder to write to (default: config/eval)")
    args = ap.parse_args(argv)
    if not args.overlap:
        directory = args.out or eval_dir()
        for robot_type in ("drone", "arm"):
            tasks = draft_tasks(robot_type)
            path = write(robot_type, tasks, directory)
            dev = sum(t.split == "dev" for t in tasks)
            print(f"{path}: {len(tasks)} tasks ({dev} dev, {len(tasks) - dev} test)")
        report_overlap(load_eval_tasks(directory=directory))
    else:
        report_overlap(load_eval_tasks(directory=args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
