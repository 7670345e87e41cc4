"""What a chat model reads for a robot type: the system message rendered from its skill set, then its worked examples
and the request (docs/robots.md, docs/models.md "Prompts from the skill set").

    PYTHONPATH=. .venv/bin/python tools/robot_prompt.py rover --skills-dir examples/rover
    PYTHONPATH=. .venv/bin/python tools/robot_prompt.py rover --skills-dir examples/rover --model smollm2

Without ``--model``: the messages, one block per message. With ``--model``: the exact text the model's chat template
makes of them (the server's prompt for this task and scene) and its token counts, the shared part the server
caches once per robot type and the request's own. Loads the model's tokenizer only.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from timely_llm_ros.core.robot_types import load_robot_types  # noqa: E402
from timely_llm_ros.core.skills.chat_prompt import chat_messages, shared_messages  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("robot_type", help="a skill set: the package's (drone, arm, chat) or one in --skills-dir")
    parser.add_argument("--skills-dir", default="", help="a team's folder with skills/*.yaml and exec_time/*.yaml")
    parser.add_argument("--task", default="<task>", help="the request's task (default: a placeholder)")
    parser.add_argument("--scene", default="<scene>", help="the request's scene text (goal field context)")
    parser.add_argument("--model", default="", help="an entry of config/models.yaml: render with its chat template")
    args = parser.parse_args(argv)
    sets = load_robot_types(args.skills_dir or None).skill_sets
    if args.robot_type not in sets:
        parser.error(f"no skill set {args.robot_type!r}; known: {', '.join(sorted(sets))} (a team's type needs "
                     "--skills-dir)")
    skill_set = sets[args.robot_type]
    messages = chat_messages(skill_set, args.task, args.scene)
    if not args.model:
        for m in messages:
            print(f"--- {m['role']}\n{m['content']}")
        return 0
    from timely_llm_ros.core.models import model_spec
    from timely_llm_ros.engine.models import weights_folder
    from timely_llm_ros.engine.tokenizer import load_tokenizer

    spec = model_spec(args.model)
    tokenizer = load_tokenizer(weights_folder(spec))
    if not spec.chat_template or not tokenizer.has_chat_template:
        parser.error(f"model {args.model!r} reads the raw planner prompt, not chat messages: "
                     f"{skill_set.build_prompt(args.task, args.scene)!r}")
    print(tokenizer.hf_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True), end="")
    shared = len(tokenizer.encode_chat(shared_messages(skill_set), spec.add_bos, add_generation_prompt=False))
    total = len(tokenizer.encode_chat(messages, spec.add_bos))
    print(f"\n--- {total} tokens: {shared} shared by every {args.robot_type} request (cached once), "
          f"{total - shared} this request's", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
