"""Prepared models live in one cache folder, whichever layout the package runs from (paths.model_cache_dir): the
override (the server's model_cache_dir), else $TIMELY_LLM_ROS_MODEL_CACHE, else the user's cache folder. A model
that is not prepared and cannot be says which setting chooses that folder, before any slow work."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ros_harness import REPO, ros_env
from timely_llm_ros.core.models import GgufSource, ModelSpec, model_spec
from timely_llm_ros.engine.models import ModelPrepareError, weights_folder
from timely_llm_ros.paths import MODEL_CACHE_ENV, model_cache_dir


def test_the_cache_folder_is_the_override_then_the_environment_then_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(MODEL_CACHE_ENV, raising=False)
    assert model_cache_dir() == tmp_path / "xdg" / "timely_llm_ros" / "models"
    monkeypatch.setenv(MODEL_CACHE_ENV, str(tmp_path / "env"))
    assert model_cache_dir() == tmp_path / "env"
    assert model_cache_dir(tmp_path / "param") == tmp_path / "param"
    assert model_cache_dir("") == tmp_path / "env"          # an empty parameter means: not set


def test_a_relative_xdg_cache_home_is_ignored_as_the_spec_says(monkeypatch):
    monkeypatch.delenv(MODEL_CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert model_cache_dir() == Path.home() / ".cache" / "timely_llm_ros" / "models"


def test_an_unwritable_cache_fails_before_converting_and_names_the_settings(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(ModelPrepareError) as err:
        weights_folder(model_spec("smollm2"), cache_dir=blocker / "models", progress=pytest.fail)
    assert str(blocker / "models") in str(err.value)
    assert "model_cache_dir" in str(err.value) and MODEL_CACHE_ENV in str(err.value)


def test_an_unprepared_model_asked_not_to_convert_says_how_to_prepare_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"prepare smollm2.*model_cache_dir"):
        weights_folder(model_spec("smollm2"), convert=False, cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_gguf_entry_whose_package_is_missing_says_what_to_install(tmp_path):
    spec = ModelSpec(name="mine", gguf=GgufSource(file="mine.gguf", package="no_such_model_wheel"))
    with pytest.raises(FileNotFoundError, match="'no_such_model_wheel' .* is not installed"):
        weights_folder(spec, cache_dir=tmp_path)


def test_the_servers_model_cache_dir_reaches_the_model_and_a_bad_one_fails_configure_with_the_reason(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    proc = subprocess.run([sys.executable, "-m", "timely_llm_ros.ros.server.node", "--ros-args", "-p",
                           "model:=smollm2", "-p", f"model_cache_dir:={blocker / 'models'}"],
                          cwd=REPO, env=ros_env(), capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert f"the model cache {blocker / 'models'} is not writable" in out, out[-3000:]
