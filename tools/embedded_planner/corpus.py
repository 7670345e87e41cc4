"""Planner training corpus: scenes, tasks and valid plans mirroring the LRTrace workloads.

Every example is (robot_type, task, scene, plan). Plans are built from the task and the scene (object
names are copied from them), so the model has to read its prompt. Generation is deterministic per seed.
The held-out split is by (task template, key object): a combination lands in the held-out set by a hash
of its name, independent of the seed, so the evaluation measures generalisation to unseen pairs.
"""
from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from typing import Callable

from timely_llm_ros.core.skills.prompt import build_prompt

HELDOUT_PERCENT = 12

ROOMS = ["living room", "kitchen", "bedroom", "office", "hallway", "garage", "bathroom", "study", "attic", "basement"]
SMALL_OBJECTS = [
    "cat", "dog", "keys", "wallet", "book", "toy", "phone", "cup", "bottle", "remote", "glasses", "ball",
    "teddy bear", "backpack", "umbrella", "laptop", "shoe", "hat", "watch", "pillow", "plant", "box", "camera",
    "headphones", "charger", "notebook", "pen", "spoon", "towel", "sock", "toy car", "doll", "puzzle", "ring",
    "candle", "clock", "vase", "magazine", "bag", "jacket",
]
FURNITURE = {"bed": 60, "sofa": 50, "table": 80, "desk": 70, "chair": 40, "cabinet": 120, "shelf": 100, "counter": 90,
             "dresser": 100, "bench": 40}
PURPOSES = {
    "cutting paper": ["scissors", "knife", "box cutter", "paper cutter"],
    "drinking water": ["cup", "mug", "glass", "bottle"],
    "writing a note": ["pen", "pencil", "marker", "crayon"],
    "sitting down": ["chair", "stool", "sofa", "bench"],
    "lighting the room": ["lamp", "flashlight", "candle", "lantern"],
    "opening a can": ["can opener", "knife", "spoon"],
    "fixing a screw": ["screwdriver", "wrench", "pliers"],
    "cleaning a spill": ["towel", "sponge", "paper towel", "mop"],
    "carrying groceries": ["bag", "backpack", "basket", "box"],
    "keeping warm": ["blanket", "jacket", "sweater", "scarf"],
}
FILLER_OBJECTS = ["lamp", "rug", "window", "door", "painting", "tv", "plant", "mirror", "curtain", "radiator", "fan",
                  "bin"]
PEOPLE = ["person", "child", "man", "woman", "worker", "cyclist", "runner", "crowd", "baby", "visitor"]
OBSTACLES = ["wall", "pole", "tree", "door", "lamp", "shelf", "window", "drone", "ceiling fan", "ball", "car", "cable"]
MOVING_OBSTACLES = {"drone", "door", "ball", "car", "ceiling fan"}
ANIMALS = ["bird", "dog", "cat", "bee", "hawk", "squirrel", "bat", "crow", "wasp", "goose"]
FLYING_ANIMALS = {"bird", "bee", "hawk", "bat", "crow", "wasp", "goose"}
DIRECTIONS = {"in front": "mb", "behind": "mf", "on the left": "mr", "on the right": "ml", "above": "md", "below": "mu"}
BLOCKS = [f"{c} {s}" for c in ["red", "blue", "green", "yellow", "orange", "purple", "white", "black"]
          for s in ["block", "cube", "cylinder"]]
DESK_ITEMS = {
    "paper": "trash bin", "wrapper": "trash bin", "banana peel": "trash bin", "tissue": "trash bin", "can": "trash bin",
    "pen": "drawer", "pencil": "drawer", "stapler": "drawer", "notebook": "drawer", "ruler": "drawer",
    "eraser": "drawer", "cup": "tray", "mug": "tray", "plate": "tray", "spoon": "tray", "glass": "tray",
}
FRUITS = ["apple", "banana", "orange", "pear", "lemon", "grape", "peach", "mango", "kiwi", "plum", "cherry", "lime"]
VEGETABLES = ["carrot", "potato", "tomato", "onion", "cucumber", "pepper", "broccoli", "lettuce", "garlic", "cabbage",
              "zucchini", "eggplant"]
NUMBER_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 8: "eight"}


@dataclass(frozen=True)
class Example:
    """One planning example; ``template`` and ``key`` define its held-out combination."""

    robot_type: str
    task: str
    context: str
    plan: str
    template: str
    key: str

    @property
    def prompt(self) -> str:
        """The planner prompt (shared format with the server)."""
        return build_prompt(self.robot_type, self.task, self.context)

    @property
    def heldout(self) -> bool:
        """True when (template, key) belongs to the held-out split."""
        return zlib.crc32(f"{self.template}|{self.key}".encode()) % 100 < HELDOUT_PERCENT


def _q(text: str) -> str:
    return f"'{text}'"


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _scene(rng: random.Random, must: list[str], pool: list[str], extra: int,
           absent: tuple[str, ...] = ()) -> tuple[str, list[str]]:
    """A drone scene: a room and a shuffled list of visible objects containing ``must`` and none of ``absent``."""
    others = [o for o in pool if o not in must and o not in absent]
    objs = must + rng.sample(others, extra)
    rng.shuffle(objs)
    return f"room: {rng.choice(ROOMS)}; objects: {', '.join(objs)}", objs


# ---- drone, normal tasks (traces 1-5 and variants) ----

FIND = ["look for the {o}", "find the {o}", "where is the {o}?", "search for the {o}", "can you find the {o}?",
        "locate the {o}", "please look for my {o}", "go find the {o}", "I lost my {o}, find it", "is there a {o} here?",
        "help me find the {o}", "look around for the {o}"]
CHECK_TWO = ["check for {a} or {b}", "look for my {a} or my {b}", "find either the {a} or the {b}",
             "is my {a} or {b} here?", "check whether the {a} or the {b} is around", "search for {a} or {b}"]
ON_FURN = ["check the {o} on the {f}", "is the {o} on the {f}?", "see if there is a {o} on the {f}",
           "look at the {o} on top of the {f}", "check whether the {o} is on the {f}"]
UNDER_FURN = ["find a {o} under the {f}", "look under the {f} for the {o}", "check if the {o} is under the {f}",
              "is there a {o} below the {f}?", "search under the {f} for a {o}"]
PURPOSE = ["find a tool for {p}", "find something for {p}", "I need something for {p}",
           "bring me an object for {p}", "what can I use for {p}?"]
APPROACH = ["approach the {o} if it is farther than {n} cm", "get closer to the {o} when it is more than {n} cm away",
            "if the {o} is over {n} cm away, go to it"]
PROBE = ["tell me what is on the {f}", "what is on the {f}?", "describe the {f}", "check what lies on the {f}"]


def _find_block(obj: str, visible: bool, ret: str = "found") -> str:
    body = f"?iv({_q(obj)})==True{{g({_q(obj)});tp();->{_q(ret)};}}"
    return body if visible else f"s({_q(obj)});{body}"


def _drone_find(rng: random.Random, i: int | None = None, obj: str | None = None) -> Example:
    i, obj = rng.randrange(len(FIND)) if i is None else i, obj or rng.choice(SMALL_OBJECTS)
    visible = rng.random() < 0.4
    context, _ = _scene(rng, [obj] if visible else [], [*FILLER_OBJECTS, *SMALL_OBJECTS], rng.randint(2, 4), (obj,))
    if visible:
        plan = f"g({_q(obj)});tp();->{_q('found')};"
    else:
        plan = _find_block(obj, False) + f"->{_q('not found')};"
    return Example("drone", FIND[i].format(o=obj), context, plan, f"find{i}", obj)


def _drone_check_two(rng: random.Random, i: int | None = None, pair: tuple[str, str] | None = None) -> Example:
    i = rng.randrange(len(CHECK_TWO)) if i is None else i
    a, b = pair or rng.sample(SMALL_OBJECTS, 2)
    seen = [o for o in (a, b) if rng.random() < 0.4]
    context, _ = _scene(rng, seen, [*FILLER_OBJECTS, *SMALL_OBJECTS], rng.randint(2, 3), (a, b))
    plan = "".join(_find_block(o, o in seen, o) for o in (a, b)) + f"->{_q('none')};"
    return Example("drone", CHECK_TWO[i].format(a=a, b=b), context, plan, f"two{i}", a)


def _drone_on_furn(rng: random.Random, i: int | None = None, obj: str | None = None, furn: str | None = None
                   ) -> Example:
    i = rng.randrange(len(ON_FURN)) if i is None else i
    obj, furn = obj or rng.choice(SMALL_OBJECTS), furn or rng.choice(list(FURNITURE))
    context, _ = _scene(rng, [furn], FILLER_OBJECTS, rng.randint(2, 4))
    plan = f"g({_q(furn)});?iv({_q(obj)})==True{{tp();->{_q('yes')};}}->{_q('no')};"
    return Example("drone", ON_FURN[i].format(o=obj, f=furn), context, plan, f"on{i}", obj)


def _drone_under_furn(rng: random.Random, i: int | None = None, obj: str | None = None, furn: str | None = None
                      ) -> Example:
    i = rng.randrange(len(UNDER_FURN)) if i is None else i
    obj, furn = obj or rng.choice(SMALL_OBJECTS), furn or rng.choice(list(FURNITURE))
    context, _ = _scene(rng, [furn], FILLER_OBJECTS, rng.randint(2, 4))
    plan = (f"g({_q(furn)});md({FURNITURE[furn]});s({_q(obj)});"
            f"?iv({_q(obj)})==True{{tp();->{_q('found')};}}->{_q('not found')};")
    return Example("drone", UNDER_FURN[i].format(o=obj, f=furn), context, plan, f"under{i}", obj)


def _drone_purpose(rng: random.Random, i: int | None = None, purpose: str | None = None) -> Example:
    i, purpose = rng.randrange(len(PURPOSE)) if i is None else i, purpose or rng.choice(list(PURPOSES))
    tools = PURPOSES[purpose]
    present = [t for t in tools if rng.random() < 0.35]
    filler = [o for o in FILLER_OBJECTS + SMALL_OBJECTS if not any(o == t for p in PURPOSES.values() for t in p)]
    context, objs = _scene(rng, present, filler, rng.randint(2, 3))
    chosen = next((o for o in objs if o in tools), None)
    if chosen:
        plan = f"g({_q(chosen)});tp();->{_q(chosen)};"
    else:
        plan = f"sa({_q('what can be used for ' + purpose + '?')});rp();"
    return Example("drone", PURPOSE[i].format(p=purpose), context, plan, f"purpose{i}", purpose)


def _drone_motion(rng: random.Random) -> Example:
    kind = rng.randrange(5)
    n = rng.choice(range(20, 160, 10))
    d = rng.choice([30, 45, 60, 90, 120, 180])
    context = f"room: {rng.choice(ROOMS)}; objects: {', '.join(rng.sample(FILLER_OBJECTS, 2))}"
    if kind == 0:
        left = rng.random() < 0.5
        task = f"move forward {n} cm and turn {'left' if left else 'right'} {d} degrees"
        plan = f"mf({n});{'tu' if left else 'tc'}({d});"
    elif kind == 1:
        up = rng.random() < 0.5
        task = f"fly {'up' if up else 'down'} {n} cm then take a picture"
        plan = f"{'mu' if up else 'md'}({n});tp();"
    elif kind == 2:
        task = f"fly a square with {n} cm sides"
        plan = f"4{{mf({n});tc(90);}}"
    elif kind == 3:
        k = rng.choice(list(NUMBER_WORDS))
        task = f"turn around and take {NUMBER_WORDS[k]} pictures"
        plan = f"{k}{{tc({360 // k});tp();}}"
    else:
        side = rng.choice(["left", "right", "back"])
        task = f"move {side} {n} cm, wait {d // 30} seconds and come back"
        go, back = {"left": ("ml", "mr"), "right": ("mr", "ml"), "back": ("mb", "mf")}[side]
        plan = f"{go}({n});d({d // 30});{back}({n});"
    return Example("drone", task, context, plan, f"motion{kind}", str(n))


def _drone_approach(rng: random.Random) -> Example:
    i, obj, n = rng.randrange(len(APPROACH)), rng.choice(SMALL_OBJECTS), rng.choice(range(50, 310, 10))
    context, _ = _scene(rng, [obj], FILLER_OBJECTS, rng.randint(1, 3))
    plan = f"_1=od({_q(obj)});?_1>{n}{{g({_q(obj)});}}tp();"
    return Example("drone", APPROACH[i].format(o=obj, n=n), context, plan, f"approach{i}", obj)


def _drone_probe(rng: random.Random) -> Example:
    i, furn = rng.randrange(len(PROBE)), rng.choice(list(FURNITURE))
    context, _ = _scene(rng, [furn], FILLER_OBJECTS + SMALL_OBJECTS, rng.randint(2, 3))
    plan = f"g({_q(furn)});_1=p({_q('what is on the ' + furn + '?')});l({_q('looked at the ' + furn)});"
    return Example("drone", PROBE[i].format(f=furn), context, plan, f"probe{i}", furn)


def _drone_lrtrace(rng: random.Random) -> Example:
    """LRTrace traces 1-5 in their own wording (look for the cat, ...), in random scenes."""
    return rng.choice([
        lambda: _drone_find(rng, 0, "cat"),
        lambda: _drone_check_two(rng, 0, ("keys", "wallet")),
        lambda: _drone_on_furn(rng, 0, "book", "cabinet"),
        lambda: _drone_under_furn(rng, 0, "toy", "bed"),
        lambda: _drone_purpose(rng, 0, "cutting paper"),
    ])()


# ---- drone, urgent tasks (traces 6-8): two evasive moves, or a delay then a move ----

INJURY = ["a {t} is too close, avoid injuring them", "move away from the {t}", "avoid hitting the {t}",
          "the {t} is in danger, get away now"]
COLLISION = ["prevent a collision with the {t}", "the {t} is in your path, avoid it", "avoid crashing into the {t}",
             "stop before hitting the {t}"]
EVADE = ["evade the {t}", "a {t} is attacking, get away", "escape from the {t}", "the {t} is coming at you, dodge it"]


def _away(direction: str, dist: int) -> str:
    return f"{DIRECTIONS[direction]}({80 if dist < 100 else 50});"


def _drone_urgent(rng: random.Random) -> Example:
    kind = rng.randrange(3)
    templates, things = [(INJURY, PEOPLE), (COLLISION, OBSTACLES), (EVADE, ANIMALS)][kind]
    i, thing = rng.randrange(len(templates)), rng.choice(things)
    direction, dist = rng.choice(list(DIRECTIONS)), rng.choice(range(30, 200, 10))
    context = f"{thing} {direction}, {dist} cm away"
    vertical = direction in ("above", "below")
    if kind == 1 and thing in MOVING_OBSTACLES:
        plan = f"d(1);{_away(direction, dist)}"
    elif kind == 2 and thing in FLYING_ANIMALS:
        plan = _away(direction, dist) + ("ml(40);" if vertical else "md(40);")
    else:
        plan = _away(direction, dist) + ("mr(40);" if vertical else "mu(40);")
    name = ["injury", "collision", "evade"][kind]
    return Example("drone", templates[i].format(t=thing), context, plan, f"{name}{i}", thing)


# ---- arm tasks (traces 9-11): 8-12 actions ----

STACK = ["stack the {a} on the {b} and the {c} on top", "put the {a} on the {b}, then the {c} on the {a}",
         "place the {a} onto the {b} and then the {c} onto the {a}"]
TOWER = ["build a tower with the {a} at the bottom, then the {b}, then the {c}",
         "make a stack: {a} at the bottom, {b} in the middle, {c} on top"]
CLEAN = ["clean the desk", "tidy up my desk", "clear the desk", "put away the things on the desk",
         "clean up the workspace", "make the desk tidy"]
CLASSIFY = ["sort the fruits and vegetables", "put fruits in the fruit basket and vegetables in the vegetable basket",
            "classify the produce on the table", "separate the fruits from the vegetables", "sort the food by type"]
MOVE_TO = ["move the {a} to ({x}, {y}) and the {b} to ({u}, {v})",
           "place the {a} at {x}, {y} and the {b} at {u}, {v}"]


def _pick_place(obj: str, dest: str) -> str:
    return f"gt({_q(obj)});pi({_q(obj)});gt({_q(dest)});dr();"


def _scan_all(*objs: str) -> str:
    return "".join(f"sc({_q(o)});" for o in objs)


def _arm_stack(rng: random.Random) -> Example:
    a, b, c = rng.sample(BLOCKS, 3)
    table = [a, b, c] + rng.sample([x for x in BLOCKS if x not in (a, b, c)], rng.randint(0, 2))
    rng.shuffle(table)
    context = f"table: {', '.join(table)}"
    if rng.random() < 0.5:
        i = rng.randrange(len(STACK))
        task = STACK[i].format(a=a, b=b, c=c)
        plan = _scan_all(a, b, c) + _pick_place(a, b) + _pick_place(c, a)
        return Example("arm", task, context, plan, f"stack{i}", a)
    i = rng.randrange(len(TOWER))
    task = TOWER[i].format(a=a, b=b, c=c)
    plan = _scan_all(a, b, c) + _pick_place(b, a) + _pick_place(c, b)
    return Example("arm", task, context, plan, f"tower{i}", a)


def _arm_clean(rng: random.Random) -> Example:
    i = rng.randrange(len(CLEAN))
    items = rng.sample(list(DESK_ITEMS), rng.randint(2, 3))
    context = f"desk: {', '.join(items)}; places: trash bin, drawer, tray"
    plan = "".join(_pick_place(o, DESK_ITEMS[o]) for o in items)
    return Example("arm", CLEAN[i], context, plan, f"clean{i}", items[0])


def _arm_classify(rng: random.Random) -> Example:
    i = rng.randrange(len(CLASSIFY))
    items = rng.sample(FRUITS + VEGETABLES, rng.randint(2, 3))
    context = f"table: {', '.join(items)}; baskets: fruit basket, vegetable basket"
    plan = "".join(_pick_place(o, "fruit basket" if o in FRUITS else "vegetable basket") for o in items)
    return Example("arm", CLASSIFY[i], context, plan, f"classify{i}", items[0])


def _arm_move_to(rng: random.Random) -> Example:
    i = rng.randrange(len(MOVE_TO))
    a, b = rng.sample(BLOCKS + FRUITS, 2)
    x, y, u, v = (rng.randrange(0, 60, 5) for _ in range(4))
    context = f"table: {', '.join(rng.sample([a, b], 2))}"
    plan = "".join(f"sc({_q(o)});gt({_q(o)});pi({_q(o)});mv({p}, {r});dr();" for o, p, r in ((a, x, y), (b, u, v)))
    return Example("arm", MOVE_TO[i].format(a=a, b=b, x=x, y=y, u=u, v=v), context, plan, f"moveto{i}", a)


# ---- chat ----

GREETINGS = ["hello", "hi there", "good morning", "hey robot", "good evening"]
SEE = ["what do you see?", "describe the room", "what is around you?", "tell me what is in the room"]
IS_THERE = ["is there a {o} in the room?", "do you see a {o}?", "can you see my {o}?"]


def _chat(rng: random.Random) -> Example:
    kind = rng.randrange(4)
    room = rng.choice(ROOMS)
    objs = rng.sample(SMALL_OBJECTS + FILLER_OBJECTS, rng.randint(2, 4))
    context = f"room: {room}; objects: {', '.join(objs)}"
    if kind == 0:
        i = rng.randrange(len(GREETINGS))
        return Example("chat", GREETINGS[i], context, "Hello! How can I help you today?", f"hello{i}", room)
    if kind == 1:
        i = rng.randrange(len(SEE))
        plan = f"I see {_join(['a ' + o for o in objs])} in the {room}."
        return Example("chat", SEE[i], context, plan, f"see{i}", objs[0])
    if kind == 2:
        i, obj = rng.randrange(len(IS_THERE)), rng.choice(SMALL_OBJECTS)
        plan = (f"Yes, there is a {obj} in the {room}." if obj in objs
                else f"No, I do not see a {obj} in the {room}. Should I search for it?")
        return Example("chat", IS_THERE[i].format(o=obj), context, plan, f"isthere{i}", obj)
    return Example("chat", "what can you do?", context,
                   "I can plan for drones and arms. Tell me a task and I will make a plan!", "cando", room)


GENERATORS: list[tuple[Callable[[random.Random], Example], float]] = [
    (_drone_lrtrace, 0.06), (_drone_find, 0.12), (_drone_check_two, 0.07), (_drone_on_furn, 0.07),
    (_drone_under_furn, 0.07),
    (_drone_purpose, 0.07), (_drone_motion, 0.06), (_drone_approach, 0.04), (_drone_probe, 0.04),
    (_drone_urgent, 0.16), (_arm_stack, 0.08), (_arm_clean, 0.07), (_arm_classify, 0.07), (_arm_move_to, 0.03),
    (_chat, 0.04),
]


def generate(n: int, seed: int = 0) -> list[Example]:
    """``n`` examples drawn deterministically from ``seed`` (both splits mixed; see ``split``)."""
    rng = random.Random(seed)
    makers, weights = zip(*GENERATORS)
    return [rng.choices(makers, weights)[0](rng) for _ in range(n)]


def split(examples: list[Example]) -> tuple[list[Example], list[Example]]:
    """(train, held-out) by (template, key) combination."""
    return [e for e in examples if not e.heldout], [e for e in examples if e.heldout]
