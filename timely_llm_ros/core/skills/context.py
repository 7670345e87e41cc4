"""What a goal's context and task say about the robot's scene: the objects it lists, where hazards are, the
phrases of the task that may name an object, and the objects the task tells the robot to keep away from. Grounded
decoding (core/skills/grammar.py) admits these in a plan's object slots; the evaluation builds its simulated scenes
from the same reading.

The context convention (docs/robots.md), sections separated by ';':

- ``label: a, b, c`` lists objects a, b and c (``table: red cube, blue bowl``, ``places: drawer, tray``); the
  labels in ``PLACE_LABELS`` name where the robot is instead (``room: kitchen``): their value is no object; the
  labels in ``FIXED_PLACE_LABELS`` (``places``, ``bins``, ...) list fixed places things go into, which a robot
  never lifts (``fixed_places``). A skill set adds its own of both (``place_labels``, ``fixed_place_labels``:
  ``ContextLabels``), so a conveyor's ``line: 3`` names where it is, not an object;
- a section without a label describes one object and where it is: ``lamp on the right, 50 cm away`` is the object
  ``lamp`` to the robot's right at 50 cm (``RELATIONS`` lists the directions read);
- anything else (free text) lists nothing.

A context that lists no object leaves object slots free (the caller decides); nothing here guesses objects from
free text.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Iterable

PLACE_LABELS = ("room", "location", "area", "site", "zone", "place")
# labels whose objects are fixed places things go into (a bin, a basket, a drawer): put into, never lifted
FIXED_PLACE_LABELS = frozenset({"places", "baskets", "bins", "containers", "boxes", "trays", "drawers", "shelves",
                                "destinations", "spots"})
# the sides of the robot a context places objects on (its own frame); a skill that moves the robot declares one
DIRECTIONS = ("front", "behind", "left", "right", "above", "below")
# direction words of an unlabelled section, as the robot sees them (its own frame)
RELATIONS = {
    "in front": "front", "ahead": "front", "in front of you": "front",
    "behind": "behind", "behind you": "behind",
    "on the left": "left", "to the left": "left", "left": "left",
    "on the right": "right", "to the right": "right", "right": "right",
    "above": "above", "overhead": "above", "above you": "above",
    "below": "below", "underneath": "below", "below you": "below",
}
MAX_OBJECT_WORDS = 5
# function words: a run of the task's words between two of these may name an object (task_phrases)
STOPWORDS = frozenset("""
a an the this that these those my your our their his her its it them they you me i we us he she him
and or but nor so then than if when while whether where what which who whom whose how why
to of in on at by for with from into onto over under above below behind beside between through
off out up down away around near about across along after before against within without toward towards
is are was were be been being am do does did done has have had having can could will would shall should
may might must not no yes please there here all any each every some both either neither one once
very just only also too again still now more most less least as such own same other else
""".split())
# a verb's past form, which ends a clause and never an object's name: "the dog leash slid below the recliner" names the
# dog leash, not a "dog leash slid" (task_phrases). Regular forms end in -ed (past_form); these are the irregular
# ones a task about where things went, fell or were left may use (not those that are also things: a saw, a rose, a
# drill bit, a tea set, felt)
IRREGULAR_PAST = frozenset("""
ate bent blew broke brought built caught came crept drew drove dug fell fled flew flung forgot found froze gave got
grew hid hung held kept knelt knew laid lay leapt left lent lost made meant met paid ran rang rode sank sat shook
shone slept slid slung sold sent spilt spun sprang stood stuck stung swam swept swung took taught threw told tore
understood went woke wore won wove wrote
""".split())
# -ed words that are names, not past forms (a flower bed, a tool shed, a sled, a seed)
_ED_NAMES = ("bed", "shed", "sled", "eed")

# A task keeps the robot away from what it names when it says so in one of these ways (task_hazards). The list is
# about meaning, not about any evaluation set: keeping away, collisions and contact, danger.
AVOID_CUES = re.compile(r"""\b(?:
    avoid\w* | evad\w* | dodg\w* | escap\w* | retreat\w* | flee\w* | shun\w*
  | (?:stay|get|keep|move|fly|pull|veer|back|turn|steer|go|drift|head|run|hover|break|peel|swerve|dart|dash|bolt
     |race|rush|speed|zip|scoot|climb|dive|duck|edge|slip|sheer|shy|spring|jump|sprint|zoom)\s+away
  | away\s+from | clear\s+of | get\s+clear | keep\s+clear | move\s+clear | stay\s+clear | back\s+off | move\s+off
  | keep\s+off | keep\s+out | stay\s+out | out\s+of\s+the\s+way | move\s+aside | step\s+aside | wide\s+berth
  | distance | collision\w* | collid\w* | crash\w* | hit | hitting | bump\w* | touch\w* | run\s+into | fly\s+into
  | too\s+close | getting\s+close | coming\s+at | coming\s+for | watch\s+out | look\s+out | mind | careful
  | (?:swoop|div|charg|rush|runn|fly|head|mov|speed|rac|zoom|dart|lung|barrel|hurtl|bear)ing\s+(?:straight\s+)?
    (?:at|toward|towards|for|down\s+on)\s+(?:you|us|me|the\s+(?:drone|robot|arm))
  | danger\w* | hazard\w* | threat\w* | attack\w* | aggressive | unsafe | protect\s+yourself
  | some\s+room | give\s+it\s+(?:some\s+)?(?:room|space)
  | (?:don't|do\s+not|never)\s+(?:go|get|come|fly|move|drive)\s+(?:near|close)
  | (?:don't|do\s+not|never)\s+approach
)\b""", re.VERBOSE)
# ... unless the object is where the task sends the robot: it follows one of these ("away from the cat, toward the
# door": the door is not kept away from)
APPROACH_CUES = re.compile(r"\b(?:towards?|approach\w*|reach|(?:go|fly|move|head|come|return|drive|walk|get|back|over|up|"
                           r"next|close|closer)\s+to)\s+(?:the\s+|a\s+|an\s+)?$")
_NEGATED = re.compile(r"\b(?:don't|dont|do\s+not|never|not|no)\s+(?:\w+\s+)?$")

_NUMBER = re.compile(r"(-?\d+(?:\.\d+)?)\s*(cm|m)\b")
_WORD = re.compile(r"[a-z0-9]+(?:[-'][a-z0-9]+)*")


@dataclass(frozen=True)
class ContextLabels:
    """The section labels a robot type's contexts use beyond the convention's: ``places`` name where the robot is
    (as ``room``), ``fixed_places`` list fixed places things go into (as ``bins``). Each holds normalised labels."""

    places: frozenset[str] = frozenset()
    fixed_places: frozenset[str] = frozenset()

    @classmethod
    def of(cls, places: Iterable[object] = (), fixed_places: Iterable[object] = ()) -> "ContextLabels":
        """From a skill set's lists (any case and spacing); ValueError for a label in both."""
        p = frozenset(normalise_name(str(x)) for x in places or () if normalise_name(str(x)))
        f = frozenset(normalise_name(str(x)) for x in fixed_places or () if normalise_name(str(x)))
        both = sorted(p & f | (p & FIXED_PLACE_LABELS) | (f & frozenset(PLACE_LABELS)))
        if both:
            raise ValueError(f"context label(s) {both} would both name where the robot is (place_labels, or "
                             f"{', '.join(PLACE_LABELS)}) and list fixed places (fixed_place_labels, or "
                             f"{', '.join(sorted(FIXED_PLACE_LABELS))}): give each label one meaning")
        return cls(p, f)


NO_LABELS = ContextLabels()


@dataclass(frozen=True)
class Placement:
    """An object an unlabelled section places: its direction from the robot and its distance (cm, None if not
    given)."""

    name: str
    direction: str          # one of RELATIONS' values
    distance_cm: float | None = None


@dataclass(frozen=True)
class SceneContext:
    """A context as read: the objects listed (in order, each once), where the robot is, placed objects."""

    objects: tuple[str, ...] = ()
    place: str = ""
    placements: tuple[Placement, ...] = ()
    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()   # (label, its objects) for each labelled section
    fixed_labels: frozenset[str] = FIXED_PLACE_LABELS       # the labels that list fixed places (with the robot's)

    @property
    def fixed_places(self) -> tuple[str, ...]:
        """The objects listed only under a fixed-place label (in order): places things go into. A name the context
        also lists as an item elsewhere is not one."""
        items = {o for label, group in self.groups if label not in self.fixed_labels for o in group}
        return tuple(dict.fromkeys(o for label, group in self.groups if label in self.fixed_labels
                                   for o in group if o not in items))


_QUOTES = re.compile(r"(?<![^\W_])'|'(?![^\W_])")    # a ' not between two letters or digits


def normalise_name(text: str) -> str:
    """An object name as plans write it: lower case, single spaces, no surrounding punctuation or article, and no
    quotation marks (``"red" mug`` and ``'red' mug`` are ``red mug``; an apostrophe inside a word stays: ``cat's
    bowl``)."""
    text = _QUOTES.sub("", text.replace('"', ""))
    text = " ".join(text.lower().replace("_", " ").split()).strip(" .,!?")
    return re.sub(r"^(?:the|a|an|my|some)\s+", "", text)


@functools.lru_cache(maxsize=512)
def parse_context(context: str, labels: ContextLabels = NO_LABELS) -> SceneContext:
    """Read a goal's context by the convention in the module docstring, with a robot type's own ``labels``. Cached:
    validating a goal asks its objects, scene, fixed places and hazards' sides of the same context, and the result
    is immutable."""
    objects: list[str] = []
    groups: list[tuple[str, tuple[str, ...]]] = []
    placements: list[Placement] = []
    place = ""
    for section in (s.strip() for s in (context or "").split(";")):
        if not section:
            continue
        label, colon, rest = section.partition(":")
        if colon and label.strip() and len(label.split()) <= 3:
            label = normalise_name(label)
            items = [normalise_name(i) for i in re.split(r",|\band\b", rest)]
            items = [i for i in items if i and len(i.split()) <= MAX_OBJECT_WORDS]
            if label in PLACE_LABELS or label in labels.places:
                place = place or (items[0] if items else "")
                continue
            groups.append((label, tuple(items)))
            objects += items
            continue
        placed = _placement(section)
        if placed is not None:
            placements.append(placed)
            objects.append(placed.name)
    seen: dict[str, None] = dict.fromkeys(o for o in objects if o)
    return SceneContext(tuple(seen), place, tuple(placements), tuple(groups), FIXED_PLACE_LABELS | labels.fixed_places)


def _placement(section: str) -> Placement | None:
    """``lamp on the right, 50 cm away`` -> Placement('lamp', 'right', 50.0); None for free text."""
    head, _, tail = section.partition(",")
    head_norm = " ".join(head.lower().split())
    for words in sorted(RELATIONS, key=len, reverse=True):
        if head_norm.endswith(" " + words):
            name = normalise_name(head_norm[: -len(words)])
            if not name or len(name.split()) > MAX_OBJECT_WORDS:
                return None
            distance = None
            m = _NUMBER.search(tail or "")
            if m:
                distance = float(m.group(1)) * (100.0 if m.group(2) == "m" else 1.0)
            return Placement(name, RELATIONS[words], distance)
    return None


def context_objects(context: str, labels: ContextLabels = NO_LABELS) -> tuple[str, ...]:
    """The objects a context lists (labelled sections' items and placed objects), in order, each once."""
    return parse_context(context, labels).objects


def fixed_places(context: str, labels: ContextLabels = NO_LABELS) -> tuple[str, ...]:
    """The fixed places a context lists (``places: drawer, tray`` gives drawer and tray): SceneContext.fixed_places."""
    return parse_context(context, labels).fixed_places


def past_form(word: str) -> bool:
    """``word`` is a verb's past form ("rolled", "slid"), which no object's name ends in (IRREGULAR_PAST, or a
    regular -ed form of five letters or more that is no -bed, -shed, -sled or -eed name)."""
    return word in IRREGULAR_PAST or (len(word) >= 5 and word.endswith("ed") and not word.endswith(_ED_NAMES))


def task_phrases(task: str, max_words: int = 3) -> tuple[str, ...]:
    """Phrases of the task that may name an object: each run of words between function words (STOPWORDS), and the
    run's endings of up to ``max_words`` words (an English noun phrase ends in its noun: "coin purse", "purse"),
    except those that end in a verb's past form (past_form: "the dog leash slid under the sofa" gives dog leash,
    leash and dog, no "dog leash slid"; a past form before a noun stays: "folded towel"). "where did I leave my coin
    purse?" gives leave, coin purse, purse (and coin). Numbers and one-letter words (coordinates, axis names: "at x
    10, y 55") separate runs as function words do: they name no object."""
    words = _WORD.findall(task.lower())
    runs: list[list[str]] = [[]]
    for w in words:
        if w in STOPWORDS or w.isdigit() or len(w) == 1:
            runs.append([])
        else:
            runs[-1].append(w)
    out: dict[str, None] = {}
    for run in runs:
        for end in range(len(run), 0, -1):
            if past_form(run[end - 1]):
                continue
            for start in range(max(0, end - max_words), end):
                out[" ".join(run[start:end])] = None
    return tuple(out)


def scene_objects(context: str, explicit: tuple[str, ...] = (), labels: ContextLabels = NO_LABELS
                  ) -> tuple[str, ...]:
    """The objects a goal says are in its robot's scene: ``explicit`` (its own list) or else its context's."""
    return (tuple(dict.fromkeys(normalise_name(o) for o in explicit if normalise_name(o)))
            or context_objects(context, labels))


def grounded_objects(context: str, task: str, explicit: tuple[str, ...] = (), labels: ContextLabels = NO_LABELS
                     ) -> tuple[str, ...]:
    """The names a grounded plan may put in an object slot: the scene's objects (scene_objects) plus the task's
    phrases (something to look for need not be in view yet), less those that are part of a listed name ("fruit"
    with a "fruit basket" listed: the basket goes by its whole name, and no fruit is meant by it); () when neither
    the goal nor its context lists any object (slots stay free). A skill marked ``in_scene`` takes only the scene's
    own (core/skills/grammar.py)."""
    listed = scene_objects(context, explicit, labels)
    if not listed:
        return ()
    parts = {" ".join(words[i:j]) for words in (name.split() for name in listed)
             for i in range(len(words)) for j in range(i + 1, len(words) + 1)}
    return tuple(dict.fromkeys(listed + tuple(p for p in task_phrases(task) if p not in parts)))


def task_hazards(task: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """Which of ``names`` (a request's objects) the task tells the robot to keep away from: when the task says so
    (AVOID_CUES: "stay away from the wasp", "prevent a collision with the pole", "the dog looks aggressive, back
    off"), every name it mentions, except one the task sends the robot to ("away from the cat, toward the door").
    () when the task asks for no distance. Grounded decoding keeps these out of the skills that approach an object
    (core/skills/grammar.py), so a plan cannot fly the robot to what it was told to avoid."""
    text = " ".join(_WORD.findall(task.lower().replace("\u2019", "'")))
    if not AVOID_CUES.search(text):
        return ()
    out = []
    for name in names:
        key = " ".join(_WORD.findall(name.lower()))
        found = list(re.finditer(rf"\b{re.escape(key)}\b", text)) if key else []
        if found and not all(_sends_to(text[: m.start()]) for m in found):
            out.append(name)
    return tuple(out)


def _sends_to(before: str) -> bool:
    """The words before a mention send the robot to it ("... toward the"), and do not say not to ("don't approach
    the")."""
    cue = APPROACH_CUES.search(before)
    return cue is not None and not _NEGATED.search(before[: cue.start()])


def hazard_sides(context: str, hazards: tuple[str, ...], labels: ContextLabels = NO_LABELS) -> tuple[str, ...]:
    """The sides of the robot (DIRECTIONS) on which the context places one of ``hazards`` (``task_hazards``'
    names): "lamp on the right, 50 cm away" with the lamp a hazard gives ("right",). Grounded decoding leaves out
    the skills that move the robot to these sides (a skill's ``moves``), so a plan told to keep clear of the lamp
    cannot fly right, into it. () when no hazard is placed."""
    if not hazards:
        return ()
    kept_away = {normalise_name(h) for h in hazards}
    return tuple(dict.fromkeys(p.direction for p in parse_context(context, labels).placements
                               if p.name in kept_away))
