"""The object vocabulary a training corpus draws its objects from (config/adapt/vocabulary.yaml).

Categories of names (fruit, furniture, person, ...), groups of categories (``thing``), and compound names made of a
modifier and a base name (``red mug``, ``wooden spoon``) so that multi-word names of every kind occur. A drawn
name remembers its category: a pattern's plan can depend on it (sorting fruit from vegetables).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import yaml

from timely_llm_ros.paths import config_dir


@dataclass(frozen=True)
class Drawn:
    """One object name drawn for an example, with the category it came from (its base's, for a compound)."""

    name: str
    category: str
    row: object = None          # the table row it was drawn for (patterns.py: items drawn per row)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Vocabulary:
    """Names by category; ``groups`` name sets of categories; compounds: modifier categories and how often a
    slot that admits compounds takes one."""

    categories: Mapping[str, tuple[str, ...]]
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    modifiers: tuple[str, ...] = ()
    compound_share: float = 0.0
    source: str = "<vocabulary>"
    _names: dict = field(default_factory=dict, compare=False, repr=False)   # names() per kinds, cached

    def __post_init__(self) -> None:
        for group, members in self.groups.items():
            unknown = [m for m in members if m not in self.categories]
            if unknown:
                raise ValueError(f"{self.source}: group {group!r} names unknown categories {unknown}")
        unknown = [m for m in self.modifiers if m not in self.categories]
        if unknown:
            raise ValueError(f"{self.source}: compounds.modifiers names unknown categories {unknown}")

    def categories_of(self, kind: str) -> tuple[str, ...]:
        """The categories a category or group name stands for; ValueError lists the known names."""
        if kind in self.categories:
            return (kind,)
        if kind in self.groups:
            return self.groups[kind]
        raise ValueError(f"{self.source}: no category or group {kind!r}; categories: {', '.join(self.categories)}; "
                         f"groups: {', '.join(self.groups) or 'none'}")

    def names(self, kinds: str | Iterable[str]) -> list[tuple[str, str]]:
        """(name, category) for every name of the given categories or groups, each name once (a kind listed
        twice weighs its names twice)."""
        key = (kinds,) if isinstance(kinds, str) else tuple(kinds)
        cached = self._names.get(key)
        if cached is not None:
            return cached
        out: list[tuple[str, str]] = []
        for kind in key:
            seen = set()
            for category in self.categories_of(kind):
                for name in self.categories[category]:
                    if name not in seen:
                        seen.add(name)
                        out.append((name, category))
        self._names[key] = out
        return out

    def all_names(self) -> set[str]:
        """Every base name of every category (modifiers included)."""
        return {n for names in self.categories.values() for n in names}

    def draw(self, rng: random.Random, kinds: str | Sequence[str], exclude: Iterable[str] = (),
             compound: bool = False, modifier: str | None = None) -> Drawn:
        """One name of the given categories or groups that is not in ``exclude`` (nor a word of one of them, so
        that "red mug" and "mug" never meet in one example); with ``compound``, a modifier + base name with
        probability ``compound_share``; with ``modifier`` (a category), always that category's modifier + base
        name ("red" + "cube"). ValueError when every name is excluded."""
        taken = {e.lower() for e in exclude}
        if modifier is not None:      # blocks and the like share words ("red cube", "blue cube"): whole names only
            bases, words_of = self.names(kinds), self.categories[self.categories_of(modifier)[0]]
            for _ in range(50):
                (name, category), word = rng.choice(bases), rng.choice(words_of)
                if f"{word} {name}" not in taken:
                    return Drawn(f"{word} {name}", category)
            raise ValueError(f"{self.source}: no unused {modifier} + {kinds!r} name left in this example")
        words = {w for e in taken for w in e.split()}
        pool = [(n, c) for n, c in self.names(kinds) if n not in taken and not (set(n.split()) & taken)
                and n not in words]
        if not pool:
            raise ValueError(f"{self.source}: every name of {kinds!r} is already used in this example")
        name, category = rng.choice(pool)
        if compound and self.modifiers and rng.random() < self.compound_share:
            word = rng.choice(self.categories[rng.choice(self.modifiers)])
            joined = f"{word} {name}"
            if joined not in taken and word not in words:
                name = joined
        return Drawn(name, category)

    def without(self, names: Iterable[str]) -> "Vocabulary":
        """This vocabulary less the given names (compared lower case)."""
        drop = {n.lower() for n in names}
        kept = {c: tuple(n for n in ns if n.lower() not in drop) for c, ns in self.categories.items()}
        return Vocabulary(kept, self.groups, self.modifiers, self.compound_share, self.source)


def default_vocabulary_path() -> Path:
    return config_dir() / "adapt" / "vocabulary.yaml"


def load_vocabulary(path: str | Path | None = None) -> Vocabulary:
    """Read a vocabulary file (default config/adapt/vocabulary.yaml); ValueError names the file and the field."""
    path = Path(path) if path is not None else default_vocabulary_path()
    with open(path, encoding="utf-8") as f:
        cfg = yaml.safe_load(f) or {}
    cats = cfg.get("categories")
    if not isinstance(cats, Mapping) or not cats:
        raise ValueError(f"{path}: expected a 'categories' mapping of category names to lists of names")
    categories: dict[str, tuple[str, ...]] = {}
    for name, names in cats.items():
        if not isinstance(names, list) or not all(isinstance(n, str) and n.strip() for n in names):
            raise ValueError(f"{path}: category {name!r} must be a list of non-empty names")
        quoted = [n for n in names if "'" in n or '"' in n]
        if quoted:
            raise ValueError(f"{path}: category {name!r}: names go inside quotes in plans, so they cannot hold "
                             f"quotes themselves: {quoted}")
        categories[str(name)] = tuple(dict.fromkeys(" ".join(n.lower().split()) for n in names))
    groups = {str(g): tuple(str(m) for m in members) for g, members in (cfg.get("groups") or {}).items()}
    compounds = cfg.get("compounds") or {}
    return Vocabulary(categories, groups, tuple(str(m) for m in compounds.get("modifiers", ())),
                      float(compounds.get("share", 0.0)), str(path))
