"""Drone tasks of the dev and test splits: word tables, phrasings, and one function per task kind writing a scene, a
task, its goal condition and its reference plan (the conventions are in HEADER, written at the top of
config/eval/drone.yaml). The heldout split has tables of its own (tools/evalset/heldout_drone.py)."""
from __future__ import annotations

import random
from typing import Callable

from timely_llm_ros.evaluation.evalset import EvalTask
from timely_llm_ros.evaluation.goals import (Approach, Avoid, Check, Either, FlightPath, GoalCondition, PhotosAround,
                                             Photograph, Tool)

HEADER = """\
# Plan-quality evaluation set, drone (MiniSpec, config/skills/drone.yaml). Written by tools/evalset/make_evalset.py
# from the tables of tools/evalset/drone.py (dev, test) and tools/evalset/heldout_drone.py (heldout): edit those and
# run it again rather than editing this file (test/test_evalset.py checks every plan).
# Fields: id, kind, split (dev: the only tasks to look at while choosing prompts or examples; test: the rest of the
# project's tables; heldout: tables of their own that no prompt, example or training corpus draws from), urgency
# (class the request is sent with), scene (the context the planner sees), task, goal (the condition a plan must
# bring about in the task's scene: timely_llm_ros/evaluation/goals.py), plan (a reference that achieves it),
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
"""


def q(text: str) -> str:
    return f"'{text}'"


def draft(kind: str, urgency: str, scene: str, task: str, plan: str, goal: GoalCondition,
          key_objects: tuple[str, ...] = (), key_skills: tuple[str, ...] = ()) -> EvalTask:
    """A drone task before make_evalset gives it its id and split."""
    return EvalTask(id="", robot_type="drone", kind=kind, split="", urgency=urgency, scene=scene, task=task, plan=plan,
                    key_objects=tuple(key_objects), key_skills=tuple(key_skills), goal=goal)


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
def drone_find(rng: random.Random) -> EvalTask:
    obj, visible = rng.choice(THINGS), rng.random() < 0.4
    scene = room_scene(rng, [obj] if visible else [], FILLERS + THINGS, rng.randint(2, 4), (obj,))
    plan = f"g({q(obj)});tp();->{q('found')};" if visible else look_block(obj, False, "found") + f"->{q('not found')};"
    return draft("find", "normal", scene, rng.choice(FIND).format(o=obj), plan, Photograph(obj), (obj,))


def drone_two(rng: random.Random) -> EvalTask:
    a, b = rng.sample(THINGS, 2)
    seen = [o for o in (a, b) if rng.random() < 0.4]
    scene = room_scene(rng, seen, FILLERS + THINGS, rng.randint(2, 3), (a, b))
    plan = "".join(look_block(o, o in seen, o) for o in (a, b)) + f"->{q('none')};"
    return draft("either", "normal", scene, rng.choice(TWO).format(a=a, b=b), plan, Either((a, b)), (a, b))


def drone_on(rng: random.Random) -> EvalTask:
    obj, furn = rng.choice(THINGS), rng.choice(SURFACES)
    scene = room_scene(rng, [furn], FILLERS, rng.randint(2, 4))
    plan = f"g({q(furn)});?iv({q(obj)})==True{{tp();->{q('yes')};}}->{q('no')};"
    return draft("on", "normal", scene, rng.choice(ON).format(o=obj, f=furn), plan, Check(obj, "on", furn),
                 (obj, furn))


def drone_under(rng: random.Random) -> EvalTask:
    obj, furn = rng.choice(THINGS), rng.choice(list(UNDER))
    scene = room_scene(rng, [furn], FILLERS, rng.randint(2, 4))
    plan = (f"g({q(furn)});md({UNDER[furn]});s({q(obj)});"
            f"?iv({q(obj)})==True{{tp();->{q('found')};}}->{q('not found')};")
    return draft("under", "normal", scene, rng.choice(UNDER_PHRASES).format(o=obj, f=furn), plan,
                 Check(obj, "under", furn), (obj, furn))


def drone_behind(rng: random.Random) -> EvalTask:
    obj, furn = rng.choice(THINGS), rng.choice(BEHIND)
    scene = room_scene(rng, [furn], FILLERS, rng.randint(2, 4), (furn,))
    plan = (f"g({q(furn)});mr(100);mf(100);tu(90);s({q(obj)});"
            f"?iv({q(obj)})==True{{tp();->{q('found')};}}->{q('not found')};")
    return draft("behind", "normal", scene, rng.choice(BEHIND_PHRASES).format(o=obj, f=furn), plan,
                 Check(obj, "behind", furn), (obj, furn))


def drone_purpose(rng: random.Random) -> EvalTask:
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
        return draft("purpose", "normal", scene, task, f"g({q(chosen)});tp();->{q(chosen)};", Tool(tuple(tools)),
                     (chosen,))
    return draft("purpose", "normal", scene, task, f"sa({q('what can be used for ' + purpose + '?')});rp();",
                 Tool(tuple(tools)), key_skills=("sa",))


def urgent(kind: str, phrases: list[str], thing: str, rng: random.Random, second: Callable[[bool], str]) -> EvalTask:
    direction, dist = rng.choice(list(AWAY)), rng.choice(range(30, 200, 10))
    away = AWAY[direction]
    vertical = direction in ("above", "below")
    move = f"{away}({80 if dist < 100 else 50});"
    plan = second(vertical).replace("{away}", move)
    return draft(kind, "urgent", f"{thing} {direction}, {dist} cm away", rng.choice(phrases).format(t=thing), plan,
                 Avoid(thing), key_skills=(away,))


def sidestep(vertical: bool) -> str:
    """The second evasive move: sideways after a vertical escape, up after a horizontal one."""
    return "{away}" + ("mr(40);" if vertical else "mu(40);")


def drone_injury(rng: random.Random) -> EvalTask:
    return urgent("injury", INJURY, rng.choice(PEOPLE), rng, sidestep)


def drone_collision(rng: random.Random) -> EvalTask:
    thing = rng.choice(STATIC_OBSTACLES + MOVING_OBSTACLES)
    if thing in MOVING_OBSTACLES:   # a moving obstacle: wait a second for it to pass, then move away
        return urgent("collision", COLLISION, thing, rng, lambda vertical: "d(1);{away}")
    return urgent("collision", COLLISION, thing, rng, sidestep)


def drone_evade(rng: random.Random) -> EvalTask:
    thing = rng.choice(FLYING_ANIMALS + GROUND_ANIMALS)
    if thing in FLYING_ANIMALS:     # a flier follows upwards: the second move goes left or down
        return urgent("evade", EVADE, thing, rng, lambda vertical: "{away}" + ("ml(40);" if vertical else "md(40);"))
    return urgent("evade", EVADE, thing, rng, sidestep)


def drone_approach(rng: random.Random) -> EvalTask:
    obj, n = rng.choice(THINGS), rng.choice(range(60, 310, 20))
    scene = room_scene(rng, [obj], FILLERS, rng.randint(1, 3))
    plan = f"_1=od({q(obj)});?_1>{n}{{g({q(obj)});}}tp();"
    return draft("approach", "normal", scene, rng.choice(APPROACH).format(o=obj, n=n), plan, Approach(obj, n),
                 (obj,), ("od",))


def drone_loop(rng: random.Random) -> EvalTask:
    scene = f"room: {rng.choice(ROOMS)}; objects: {', '.join(rng.sample(FILLERS, 2))}"
    shape = rng.choice(["photos", "photos", "square", "shuttle"])
    if shape == "photos":
        k = rng.choice([3, 4, 5, 6, 8])
        return draft("loop", "normal", scene, rng.choice(PHOTOS).format(k=NUMBER_WORDS.get(k, str(k))),
                     f"{k}{{tc({360 // k});tp();}}", PhotosAround(k), key_skills=("tc", "tp"))
    n = rng.choice(range(40, 210, 20))
    if shape == "square":
        return draft("loop", "normal", scene, rng.choice(SQUARE).format(n=n), f"4{{mf({n});tc(90);}}",
                     FlightPath(4 * n, round(n * 2 ** 0.5)), key_skills=("mf", "tc"))
    k = rng.choice([2, 3, 4])
    return draft("loop", "normal", scene, rng.choice(SHUTTLE).format(n=n, k=NUMBER_WORDS[k]),
                 f"{k}{{mf({n});mb({n});}}", FlightPath(2 * k * n, n), key_skills=("mf", "mb"))


KINDS: list[tuple[Callable[[random.Random], EvalTask], int]] = [
    (drone_find, 24), (drone_two, 20), (drone_on, 18), (drone_under, 15), (drone_behind, 10), (drone_purpose, 21),
    (drone_injury, 13), (drone_collision, 13), (drone_evade, 13), (drone_approach, 8), (drone_loop, 10),
]
