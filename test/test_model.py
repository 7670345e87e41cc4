"""The embedded planner: committed model, corpus generator, tokenizer and plan checkers."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from timely_llm_ros.core.skills.prompt import build_prompt  # noqa: E402
from tools.embedded_planner.corpus import generate, split  # noqa: E402
from tools.embedded_planner.evaluate import fallback_problems, plan_checker  # noqa: E402
from tools.embedded_planner.tokenizer import encode_example, train_tokenizer  # noqa: E402
from timely_llm_ros.paths import config_dir, default_model_dir  # noqa: E402


@pytest.fixture(scope="module")
def planner():
    torch.set_num_threads(2)
    model_dir = default_model_dir()
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    return model, tokenizer


def greedy(planner, robot_type: str, task: str, scene: str) -> tuple[str, bool]:
    """Greedy plan text and whether generation stopped at EOS."""
    model, tokenizer = planner
    enc = tokenizer(build_prompt(robot_type, task, scene), return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**enc, do_sample=False, max_new_tokens=200)
    new = out[0, enc["input_ids"].shape[1]:].tolist()
    return tokenizer.decode(new, skip_special_tokens=True).strip(), new[-1] == tokenizer.eos_token_id


def test_committed_model_is_a_small_llama_with_its_tokenizer(planner):
    model, tokenizer = planner
    assert model.config.model_type == "llama"
    assert model.config.vocab_size == len(tokenizer)
    assert {tokenizer.eos_token, tokenizer.pad_token, tokenizer.bos_token} == {"<|eos|>", "<|pad|>", "<|bos|>"}
    size = sum(f.stat().st_size for f in default_model_dir().glob("*.safetensors"))
    assert 0 < size <= 20 * 1024 * 1024


@pytest.mark.parametrize("robot_type,task,scene,objs", [
    ("drone", "look for the umbrella", "room: hallway; objects: lamp, door, shoe", ["umbrella"]),
    ("drone", "check the wallet on the dresser", "room: bedroom; objects: dresser, lamp, rug", ["wallet", "dresser"]),
    ("arm", "clean the desk", "desk: paper, mug; places: trash bin, drawer, tray", ["paper", "mug"]),
])
def test_greedy_plan_is_valid_stops_at_eos_and_names_the_objects(planner, robot_type, task, scene, objs):
    plan, stopped = greedy(planner, robot_type, task, scene)
    _, check = plan_checker()
    assert stopped, plan
    assert check(robot_type, plan) == [], plan
    assert fallback_problems(robot_type, plan) == [], plan
    assert all(f"'{obj}'" in plan for obj in objs), plan


def test_every_demo_fleet_task_gets_a_valid_plan_that_stops_at_eos(planner):
    yaml = pytest.importorskip("yaml")
    fleet = yaml.safe_load((config_dir() / "fleet_tasks.yaml").read_text())
    _, check = plan_checker()
    for robot_type, tasks in fleet.items():
        for entry in tasks:
            plan, stopped = greedy(planner, robot_type, entry["task"], entry["context"])
            assert stopped and check(robot_type, plan) == [], (entry["task"], plan)


def test_urgent_plan_is_a_short_evasive_move_away_from_the_threat(planner):
    plan, stopped = greedy(planner, "drone", "evade the dog", "dog on the left, 40 cm away")
    assert stopped and plan.startswith("mr("), plan
    assert len(planner[1].encode(plan)) <= 20


def test_corpus_is_deterministic_per_seed():
    assert generate(300, seed=7) == generate(300, seed=7)
    assert generate(300, seed=7) != generate(300, seed=8)


def test_corpus_plans_are_all_valid_under_the_grammar():
    _, check = plan_checker()
    examples = generate(3000, seed=11)
    assert {e.robot_type for e in examples} == {"drone", "arm", "chat"}
    for e in examples:
        assert check(e.robot_type, e.plan) == [], (e.task, e.plan)
        assert fallback_problems(e.robot_type, e.plan) == [], (e.task, e.plan)


def test_corpus_plans_copy_objects_from_the_prompt_and_depend_on_the_scene():
    examples = generate(2000, seed=9)
    finds = [e for e in examples if e.template.startswith("find")]
    assert finds
    for e in finds:
        assert f"'{e.key}'" in e.plan and e.key in e.task
        visible = e.key in e.context.split("objects: ")[1].split(", ")
        assert e.plan.startswith(f"g('{e.key}')") == visible
    for e in examples:
        if e.robot_type == "arm":
            assert all(f"'{o}'" in e.plan for o in e.context.split(";")[0].split(": ")[1].split(", ")
                       if o in e.task or e.template.startswith(("clean", "classify")))


def test_heldout_combinations_never_appear_in_training():
    train, heldout = split(generate(3000, seed=5))
    assert heldout and train
    assert not {(e.template, e.key) for e in heldout} & {(e.template, e.key) for e in train}


def test_arm_plans_have_8_to_12_actions_and_urgent_drone_plans_two():
    examples = generate(2000, seed=3)
    arm = [e.plan.count(";") for e in examples if e.robot_type == "arm"]
    urgent = [e.plan.count(";") for e in examples if e.template.startswith(("injury", "collision", "evade"))]
    assert arm and min(arm) >= 8 and max(arm) <= 12
    assert urgent and set(urgent) == {2}


def test_fallback_checker_rejects_broken_plans():
    assert fallback_problems("drone", "mf(50);tc(90") != []
    assert fallback_problems("drone", "fly(3);") != []
    assert fallback_problems("drone", "?iv('cat')==True{g('cat');") != []
    assert fallback_problems("arm", "g('cup');") != []
    assert fallback_problems("chat", "mf(3);") != []
    assert fallback_problems("drone", "s('cat');?iv('cat')==True{g('cat');tp();}->'done';") == []


def test_committed_tokenizer_round_trips_plan_text_exactly(planner):
    _, tokenizer = planner
    texts = [f"{e.prompt} {e.plan}" for e in generate(200, seed=2)]
    texts += ["  mf(50);\n\ttc(90);  ", "l('café déjà vu ✓');", "Ünïcode → 中文 plans?", ""]
    for text in texts:
        assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_prompt_and_plan_encode_as_at_inference():
    examples = generate(200, seed=4)
    tokenizer = train_tokenizer((f"{e.prompt} {e.plan}" for e in examples), vocab_size=400)
    for e in examples[:50]:
        ids, n_prompt = encode_example(tokenizer, e.prompt, e.plan)
        assert ids[:n_prompt] == tokenizer.encode(e.prompt, add_special_tokens=False)
        assert ids[-1] == tokenizer.eos_token_id
        assert tokenizer.decode(ids[n_prompt:-1]) == " " + e.plan
