"""Named urgency classes (TUF presets and what to do with a late request) from config/urgency_classes.yaml."""
from __future__ import annotations

from pathlib import Path

import yaml

from timely_llm_ros.paths import config_dir
from timely_llm_ros.core.errors import RequestError
from timely_llm_ros.core.tuf import TimeUtility, urgency_classes_from_config


def load_urgency_classes(path: Path | None = None) -> dict[str, TimeUtility]:
    """{name: TimeUtility} from a YAML mapping name -> {ert, alpha, beta, late} (default
    config/urgency_classes.yaml); ValueError names the file and what is wrong."""
    path = Path(path) if path is not None else config_dir() / "urgency_classes.yaml"
    with open(path, encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    if not isinstance(cfg, dict) or not cfg:
        raise ValueError(f"{path}: expected a mapping name -> {{ert, alpha, beta}}")
    try:
        return urgency_classes_from_config(cfg)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path}: each class needs numeric ert, alpha and beta ({exc!r})") from None
    except RequestError as exc:
        raise ValueError(f"{path}: {exc.message}") from None
