"""Drone tasks of the heldout split: rooms, objects, hazards, purposes and phrasings of their own, written apart from
the dev/test tables (tools/evalset/drone.py) and from every prompt, worked example and training corpus
(test/test_heldout_isolation.py checks that none of those draws from them). The plans follow the conventions in
tools/evalset/drone.py's HEADER; every kind of the dev/test tables is represented.
"""
from __future__ import annotations

import random
from typing import Callable

from timely_llm_ros.evaluation.evalset import EvalTask
from timely_llm_ros.evaluation.goals import (Approach, Avoid, Check, Either, FlightPath, PhotosAround, Photograph,
                                             Tool)
from tools.evalset.drone import draft, q

# ------------------------------------------------------------------ tables
ROOMS = ["greenhouse", "sunroom", "mudroom", "boathouse", "loft", "conservatory", "den", "cellar", "music room",
         "sewing room"]
THINGS = ["harmonica", "compass", "binoculars", "spinning top", "snow globe", "pocket watch", "stopwatch", "dog leash",
          "whistle", "ukulele", "kazoo", "hourglass", "sketchbook", "pincushion", "lipstick", "pill bottle",
          "chess clock", "ferret", "tortoise", "guinea pig", "magnifying glass", "tuning fork"]
DECOR = ["aquarium", "coat rack", "globe", "easel", "treadmill", "birdcage", "harp", "rocking horse", "dartboard",
         "sewing machine", "typewriter", "gramophone", "telescope"]
# how far the drone descends to see under each (cm): what lies under furniture is seen from 60 cm or lower
UNDER_DROP = {"ottoman": 50, "futon": 60, "bunk bed": 70, "sideboard": 60, "credenza": 60, "recliner": 50,
              "loveseat": 50, "footstool": 50}
SURFACES = ["sideboard", "hutch", "credenza", "trunk", "vanity", "washing machine", "freezer", "ottoman"]
SCREENS = ["wardrobe", "hutch", "sideboard", "freezer", "washing machine", "recliner", "loveseat", "trunk"]
TOOLS_FOR = {
    "sewing on a button": ["sewing needle", "thread spool"],
    "checking a fever": ["thermometer"],
    "stirring paint": ["paint stirrer", "chopstick", "popsicle stick"],
    "tightening a bolt": ["spanner", "socket set"],
    "catching a spider": ["jam jar", "tumbler"],
    "cooling off": ["hand fan", "ice pack"],
    "wedging a door": ["doorstop", "wedge"],
    "grating cheese": ["cheese grater", "zester"],
}
WALKERS = ["wheelchair user", "mail carrier", "gardener", "painter", "skateboarder", "referee", "firefighter",
           "chef", "tourist", "pensioner"]
FIXED = ["chimney", "flagpole", "scaffolding", "antenna", "signpost", "archway", "chandelier", "banister",
         "clothesline"]
MOVING = ["pendulum", "conveyor belt", "revolving door", "lawn mower", "golf cart", "hoverboard"]
FLIERS = ["magpie", "moth", "dragonfly", "parakeet", "heron", "swallow", "sparrow"]
WALKING_ANIMALS = ["badger", "weasel", "llama", "boar", "skunk", "lizard"]
SIDES = {"in front": "mb", "behind": "mf", "on the left": "mr", "on the right": "ml", "above": "md", "below": "mu"}
COUNT_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 8: "eight"}
PHOTO_COUNTS = (3, 4, 5, 6, 8)

# ------------------------------------------------------------------ phrasings
FIND = ["please spot where the {o} ended up", "I misplaced the {o}, go and spot it", "somewhere around here is my {o}",
        "track down the {o} and snap it", "my {o} is lost in this room, get me a photo of it",
        "could you scout around for a {o}?"]
EITHER = ["I'd take my {a} or my {b}, whichever turns up", "is either the {a} or the {b} around?",
          "scout for a {a}, failing that a {b}", "tell me if you notice the {a} or the {b}"]
ON = ["has someone left a {o} up on the {f}?", "hover over to the {f}: is my {o} lying there?",
      "confirm whether the {o} rests on the {f}", "on the {f}, do you notice a {o}?"]
UNDER = ["duck down beneath the {f} and look for the {o}", "the {o} slid below the {f}, is it there?",
         "search the floor under the {f} for my {o}"]
BEHIND = ["peer round the back of the {f} for my {o}", "did the {o} drop down behind the {f}?",
          "the {o} may be tucked behind the {f}, have a look"]
PURPOSE = ["anything around that would help with {p}?", "what around here would do for {p}?",
           "got anything in this room for {p}?"]
INJURY = ["a {t} is right by you, give them room", "mind the {t}, back away from them",
          "the {t} is too near your propellers, retreat"]
COLLISION = ["the {t} is close, keep from striking it", "clear away from the {t} before you bump it",
             "you will clip the {t}, move off"]
EVADE = ["a {t} is swooping at you, break away", "the {t} is after you, get some distance",
         "lose the {t}, it is too close"]
APPROACH = ["if the {o} sits beyond {n} cm, travel over to it; photograph it regardless",
            "measure how far the {o} is; past {n} cm go up to it, then take its picture"]
PHOTOS = ["do a slow pirouette and capture {k} shots spread evenly", "turn through one whole revolution taking {k} "
          "snapshots"]
SQUARE = ["fly the outline of a {n} cm square and come back", "cover a square route, {n} cm per edge"]
SHUTTLE = ["go {n} cm ahead and straight back, {k} times over", "shuttle {k} times: {n} cm out, {n} cm back"]


def scene_of(rng: random.Random, must: list[str], extra: int, avoid: tuple[str, ...] = ()) -> str:
    """'room: R; objects: ...' with ``must`` among ``extra`` decor items, shuffled."""
    objects = must + rng.sample([d for d in DECOR if d not in must and d not in avoid], extra)
    rng.shuffle(objects)
    return f"room: {rng.choice(ROOMS)}; objects: {', '.join(objects)}"


def seek(obj: str, listed: bool, ret: str) -> str:
    """Look for an object (scan first unless listed) and photograph it: the find convention."""
    body = f"?iv({q(obj)})==True{{g({q(obj)});tp();->{q(ret)};}}"
    return body if listed else f"s({q(obj)});{body}"


# ------------------------------------------------------------------ kinds
def find(rng: random.Random) -> EvalTask:
    obj, listed = rng.choice(THINGS), rng.random() < 0.35
    scene = scene_of(rng, [obj] if listed else [], rng.randint(2, 3))
    plan = f"g({q(obj)});tp();->{q('found')};" if listed else seek(obj, False, "found") + f"->{q('not found')};"
    return draft("find", "normal", scene, rng.choice(FIND).format(o=obj), plan, Photograph(obj), (obj,))


def either(rng: random.Random) -> EvalTask:
    a, b = rng.sample(THINGS, 2)
    listed = [o for o in (a, b) if rng.random() < 0.35]
    scene = scene_of(rng, listed, rng.randint(2, 3))
    plan = "".join(seek(o, o in listed, o) for o in (a, b)) + f"->{q('none')};"
    return draft("either", "normal", scene, rng.choice(EITHER).format(a=a, b=b), plan, Either((a, b)), (a, b))


def on(rng: random.Random) -> EvalTask:
    obj, furn = rng.choice(THINGS), rng.choice(SURFACES)
    plan = f"g({q(furn)});?iv({q(obj)})==True{{tp();->{q('yes')};}}->{q('no')};"
    return draft("on", "normal", scene_of(rng, [furn], rng.randint(2, 3)), rng.choice(ON).format(o=obj, f=furn),
                 plan, Check(obj, "on", furn), (obj, furn))


def under(rng: random.Random) -> EvalTask:
    obj, furn = rng.choice(THINGS), rng.choice(list(UNDER_DROP))
    plan = (f"g({q(furn)});md({UNDER_DROP[furn]});s({q(obj)});"
            f"?iv({q(obj)})==True{{tp();->{q('found')};}}->{q('not found')};")
    return draft("under", "normal", scene_of(rng, [furn], rng.randint(2, 3)),
                 rng.choice(UNDER).format(o=obj, f=furn), plan, Check(obj, "under", furn), (obj, furn))


def behind(rng: random.Random) -> EvalTask:
    obj, furn = rng.choice(THINGS), rng.choice(SCREENS)
    plan = (f"g({q(furn)});mr(100);mf(100);tu(90);s({q(obj)});"
            f"?iv({q(obj)})==True{{tp();->{q('found')};}}->{q('not found')};")
    return draft("behind", "normal", scene_of(rng, [furn], rng.randint(2, 3)),
                 rng.choice(BEHIND).format(o=obj, f=furn), plan, Check(obj, "behind", furn), (obj, furn))


def purpose(rng: random.Random) -> EvalTask:
    use = rng.choice(list(TOOLS_FOR))
    tools = TOOLS_FOR[use]
    present = [t for t in tools if rng.random() < 0.45]
    objects = present + rng.sample(DECOR, rng.randint(2, 3))
    rng.shuffle(objects)
    scene = f"room: {rng.choice(ROOMS)}; objects: {', '.join(objects)}"
    task = rng.choice(PURPOSE).format(p=use)
    chosen = next((o for o in objects if o in tools), None)
    if chosen is not None:
        return draft("purpose", "normal", scene, task, f"g({q(chosen)});tp();->{q(chosen)};", Tool(tuple(tools)),
                     (chosen,))
    return draft("purpose", "normal", scene, task, f"sa({q('what can be used for ' + use + '?')});rp();",
                 Tool(tuple(tools)), key_skills=("sa",))


def hazard(kind: str, phrases: list[str], thing: str, rng: random.Random, then: Callable[[bool], str]) -> EvalTask:
    side, dist = rng.choice(list(SIDES)), rng.choice(range(40, 210, 10))
    away = SIDES[side]
    plan = then(side in ("above", "below")).replace("{away}", f"{away}({80 if dist < 100 else 50});")
    return draft(kind, "urgent", f"{thing} {side}, {dist} cm away", rng.choice(phrases).format(t=thing), plan,
                 Avoid(thing), key_skills=(away,))


def _sidestep(vertical: bool) -> str:
    return "{away}" + ("mr(40);" if vertical else "mu(40);")


def injury(rng: random.Random) -> EvalTask:
    return hazard("injury", INJURY, rng.choice(WALKERS), rng, _sidestep)


def collision(rng: random.Random) -> EvalTask:
    thing = rng.choice(FIXED + MOVING)
    if thing in MOVING:
        return hazard("collision", COLLISION, thing, rng, lambda vertical: "d(1);{away}")
    return hazard("collision", COLLISION, thing, rng, _sidestep)


def evade(rng: random.Random) -> EvalTask:
    thing = rng.choice(FLIERS + WALKING_ANIMALS)
    if thing in FLIERS:
        return hazard("evade", EVADE, thing, rng, lambda vertical: "{away}" + ("ml(40);" if vertical else "md(40);"))
    return hazard("evade", EVADE, thing, rng, _sidestep)


def approach(rng: random.Random) -> EvalTask:
    obj, n = rng.choice(THINGS), rng.choice(range(80, 320, 40))
    plan = f"_1=od({q(obj)});?_1>{n}{{g({q(obj)});}}tp();"
    return draft("approach", "normal", scene_of(rng, [obj], rng.randint(1, 2)),
                 rng.choice(APPROACH).format(o=obj, n=n), plan, Approach(obj, n), (obj,), ("od",))


def loop(rng: random.Random) -> EvalTask:
    scene = scene_of(rng, [], 2)
    shape = rng.choice(["photos", "square", "shuttle"])
    if shape == "photos":
        k = rng.choice(PHOTO_COUNTS)
        return draft("loop", "normal", scene, rng.choice(PHOTOS).format(k=COUNT_WORDS[k]),
                     f"{k}{{tc({360 // k});tp();}}", PhotosAround(k), key_skills=("tc", "tp"))
    n = rng.choice(range(50, 250, 25))
    if shape == "square":
        return draft("loop", "normal", scene, rng.choice(SQUARE).format(n=n), f"4{{mf({n});tc(90);}}",
                     FlightPath(4 * n, round(n * 2 ** 0.5)), key_skills=("mf", "tc"))
    k = rng.choice([2, 3])
    return draft("loop", "normal", scene, rng.choice(SHUTTLE).format(n=n, k=COUNT_WORDS[k]),
                 f"{k}{{mf({n});mb({n});}}", FlightPath(2 * k * n, n), key_skills=("mf", "mb"))


KINDS: list[tuple[Callable[[random.Random], EvalTask], int]] = [
    (find, 7), (either, 6), (on, 6), (under, 5), (behind, 5), (purpose, 6), (injury, 5), (collision, 5), (evade, 5),
    (approach, 5), (loop, 6),
]
