"""Loading the engine leaves nothing in the temp folder (torch's inductor cache goes to build/)."""
from __future__ import annotations

import os
import subprocess
import sys

from timely_llm_ros.paths import share_dir


def test_loading_the_engine_leaves_the_temp_folder_empty(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = "from timely_llm_ros.engine.factory import make_engine\nmake_engine('transformers')\n"
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env["TMPDIR"] = str(tmp)
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=share_dir(), capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert sorted(p.name for p in tmp.iterdir()) == []
