"""timely_adapt: train a LoRA adapter that adapts a model entry to one or more robot types' skill sets.

    timely_adapt --model smollm2 --robot drone,arm --out models/adapters/smollm2-drone-arm
    make adapt MODEL=smollm2 ROBOT=drone,arm OUT=models/adapters/smollm2-drone-arm
    timely_adapt --model smollm2 --robot drone,arm,rover --skills-dir examples/rover --minutes 60

Then name the folder in the model entry (``adapter:`` in config/models.yaml): the engine merges it into the weights
when the model loads, and every robot type the entry serves gets the adapted model. One adapter covers every robot
type it was trained for: a server batches requests of several robot types through one merged model, so per-robot
adapters would need switching per request; train one adapter for all the robot types the server serves.

What it does:

- the corpus (adapt/corpus.py): examples drawn from each robot type's task patterns with objects from the
  vocabulary, plus its worked examples;
- the prompts: exactly the server's for this model entry (engine/model_setup.py prompt_encoder: the system prompt,
  the worked examples as chat turns, the request), so training and serving match;
- the loss: on the plan's tokens and the end-of-turn token only;
- the shared part of a robot type's prompt (its system prompt and worked examples, ~800 SmolLM2 tokens for the drone)
  is the same in every example: it runs once every ``--prefix-refresh`` steps (default 4), without gradient, with
  the adapter as it is then, and the batches' examples attend to its keys and values. The forward pass is the full
  prompt's but for the adapter's last few updates to those keys and values, which the gradient leaves out too. Each
  example then costs its own ~70 tokens, not ~850;
- a time budget (``--minutes``): after the first steps the trainer measures its speed and plans as many steps as fit
  (no more than ``--epochs`` over the corpus), the learning-rate schedule spanning them; a checkpoint is written
  every ``--save-every-min`` minutes, and SIGTERM or Ctrl-C stops the run with the adapter saved as it is;
  ``--init-adapter`` continues from an adapter's weights (a further run, with another corpus ``--seed``);
- the adapter is saved in peft's format in float16 (``--rank 8``: ~5 MB for SmolLM2-135M), with
  timely_adapter.json (the base model's identity, the robot types and their prompts' digests, the corpus's mix, the
  run) and the corpus itself (corpus.jsonl.gz: test/test_adapt.py checks that no evaluation task is in it).
"""
from __future__ import annotations

import argparse
import copy
import logging
import math
import os
import random
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from timely_llm_ros.adapt.adapter import AdapterInfo, base_identity, robot_prompt_digest
from timely_llm_ros.adapt.corpus import Example, build_corpus, read_jsonl, write_jsonl
from timely_llm_ros.core.models import ModelSpec

log = logging.getLogger("timely_adapt")

CORPUS_FILE = "corpus.jsonl.gz"          # the examples an adapter was trained on, kept beside it
TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class TrainConfig:
    """What to train and how (the command's options)."""

    robot_types: tuple[str, ...]
    out: Path
    skills_dir: str | None = None
    examples: int = 6000              # corpus size, all robot types together
    epochs: float = 1.0               # passes over the corpus at most
    minutes: float = 55.0             # time budget of the training loop
    batch_size: int = 16
    learning_rate: float = 1e-3
    warmup_steps: int = 20
    rank: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: tuple[str, ...] = TARGET_MODULES
    device: str = "cpu"
    threads: int | None = None
    seed: int = 0
    save_dtype: str = "float16"
    max_steps: int | None = None      # a hard cap (tests)
    prefix_refresh: int = 4           # steps between recomputing a robot type's shared prompt keys and values
    save_every_min: float = 20.0      # a checkpoint of the adapter in ``out`` this often (0: only at the end)
    init_adapter: Path | None = None  # continue from this adapter's weights (trained on the same model)
    log_every_s: float = 30.0
    check_examples: int = 12          # greedy plans of fresh corpus draws after training (0: none)
    precision: str = "auto"           # the forward's compute type: bf16 | fp32 | auto (bf16 where the hardware has it)


@dataclass
class Batch:
    """Examples of one robot type: the prompt part they share, and each one's own tokens and targets."""

    robot_type: str
    prefix: list[int]
    rows: list[list[int]]
    targets: list[list[int]]          # -100 where no loss (the request's prompt tokens)


@dataclass
class Encoded:
    """A robot type's examples as token ids: the longest prefix all share, then each example's rest."""

    robot_type: str
    prefix: list[int]
    rows: list[list[int]] = field(default_factory=list)
    targets: list[list[int]] = field(default_factory=list)


def encode_examples(examples: Sequence[Example], prompts, skill_sets, encode, eos_id: int) -> dict[str, Encoded]:
    """Token ids per robot type: the server's prompt for each example (``prompts``: a PromptEncoder), then the plan
    and the end token as targets. The prefix every example of a robot type shares is split off (run once a step)."""
    full: dict[str, list[tuple[list[int], list[int]]]] = {}
    for ex in examples:
        prompt = prompts(skill_sets[ex.robot_type], ex.task, ex.scene)
        full.setdefault(ex.robot_type, []).append((prompt, encode(ex.plan) + [eos_id]))
    out = {}
    for robot, pairs in full.items():
        prefix = pairs[0][0]
        for prompt, _ in pairs[1:]:
            n = 0
            while n < min(len(prefix), len(prompt)) and prefix[n] == prompt[n]:
                n += 1
            prefix = prefix[:n]
        prefix = prefix[: min(len(p) for p, _ in pairs) - 1]       # every example keeps >= 1 prompt token
        enc = Encoded(robot, prefix)
        for prompt, plan in pairs:
            rest = prompt[len(prefix):]
            enc.rows.append(rest + plan)
            enc.targets.append([-100] * len(rest) + plan)
        out[robot] = enc
    return out


def make_batches(encoded: dict[str, Encoded], batch_size: int, rng: random.Random) -> list[Batch]:
    """One epoch of batches: each robot type's examples ordered by length (ties at random) and cut into batches, so
    a batch pads little, then the batches shuffled."""
    batches = []
    for robot, enc in encoded.items():
        order = sorted(range(len(enc.rows)), key=lambda j: (len(enc.rows[j]), rng.random()))
        for i in range(0, len(order), batch_size):
            idx = order[i:i + batch_size]
            batches.append(Batch(robot, enc.prefix, [enc.rows[j] for j in idx], [enc.targets[j] for j in idx]))
    rng.shuffle(batches)
    return batches


def prefix_kv(model, prefix: list[int], device) -> list[tuple]:
    """The keys and values of a shared prompt prefix per layer, without gradient, with the adapter as it is now."""
    import torch

    with torch.no_grad():
        cache = model(torch.tensor([prefix], device=device), use_cache=True).past_key_values
    return [(layer.keys, layer.values) for layer in cache.layers]


def batch_loss(model, batch: Batch, shared: list[tuple] | None, device, pad_id: int):
    """Mean cross-entropy over the batch's target tokens. The rows follow the shared prefix, whose keys and values
    (``shared``, from prefix_kv) are repeated for every row; they are right-padded (causal attention: padding after a
    token never changes it); the output layer runs only where there is a target (the plan's tokens)."""
    import torch
    import torch.nn.functional as F
    from transformers.cache_utils import DynamicCache

    n = len(batch.rows)
    width = max(len(r) for r in batch.rows)
    x = torch.full((n, width), pad_id, dtype=torch.long, device=device)
    y = torch.full((n, width), -100, dtype=torch.long, device=device)
    for i, (row, target) in enumerate(zip(batch.rows, batch.targets)):
        x[i, :len(row)] = torch.tensor(row, device=device)
        y[i, :len(target)] = torch.tensor(target, device=device)
    cache = None
    if shared:
        cache = DynamicCache(ddp_cache_data=[(k.repeat(n, 1, 1, 1), v.repeat(n, 1, 1, 1)) for k, v in shared])
    causal_lm = model.get_base_model()           # the LoRA-injected model: its body, then its output layer
    hidden = causal_lm.model(input_ids=x, past_key_values=cache, use_cache=False).last_hidden_state
    wanted = y[:, 1:] != -100
    logits = causal_lm.lm_head(hidden[:, :-1][wanted])
    loss = F.cross_entropy(logits.float(), y[:, 1:][wanted])
    return loss, int(wanted.sum()), n * width


class Schedule:
    """Linear warm-up, then cosine decay to a tenth, over a number of steps that the time budget may lower."""

    def __init__(self, total: int, warmup: int) -> None:
        self.total, self.warmup = max(1, total), max(0, warmup)

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / (self.warmup + 1)
        span = max(1, self.total - self.warmup)
        done = min(1.0, (step - self.warmup) / span)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done))


def steps_in_budget(planned: int, current: int, step: int, left_s: float, per_step_s: float) -> int:
    """How many steps a run plans, ``step`` steps in with ``left_s`` seconds of its budget left, at the mean step
    time so far: never more than ``planned`` nor fewer than ``step + 1``. The first steps are a noisy estimate (a
    step that refreshes a shared prompt costs more than one that does not), so for the first quarter of the plan
    the count may grow back as well as shrink (the cosine schedule has barely begun); after that it only shrinks,
    when the budget would be overrun."""
    fits = min(planned, step + int(max(0.0, left_s) / max(per_step_s, 1e-9)))
    if fits < current or (fits > current and step <= planned // 4):
        return max(step + 1, fits)
    return current


def resolve_precision(asked: str, device) -> str:
    """The compute type of the training forward: ``bf16`` (autocast; the adapter's weights and the optimizer stay
    float32) or ``fp32``. ``auto`` takes bf16 on a GPU that supports it and on a CPU with native bf16 dot products
    (AVX512_BF16 or AMX: 1.45x faster steps on a 2-core AVX-512 EPYC, with the same loss curve to the second
    decimal), fp32 elsewhere (an AVX2 CPU would emulate bf16, slower than fp32)."""
    import torch

    if asked not in ("auto", "bf16", "fp32"):
        raise ValueError(f"--precision {asked!r}: say bf16, fp32 or auto")
    if asked != "auto":
        return asked
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "fp32"
    return "bf16" if ("avx512_bf16" in flags or "amx_bf16" in flags) else "fp32"


def threading_main() -> bool:
    """Whether this is the main thread (signal handlers can only be set there)."""
    import threading

    return threading.current_thread() is threading.main_thread()


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def earlier_runs(adapter: Path) -> list[dict]:
    """The runs an adapter's weights already hold, oldest first (each its corpus's size and seed, and its training
    record), so that a continued adapter's timely_adapter.json tells its whole training."""
    before = AdapterInfo.read(adapter)
    own = {k: v for k, v in before.training.items() if k != "earlier_runs"}
    corpus = {k: before.corpus.get(k) for k in ("examples", "seed", "skills_dir")}
    return list(before.training.get("earlier_runs", [])) + [{"corpus": corpus, "training": own}]


def train_adapter(spec: ModelSpec, config: TrainConfig) -> AdapterInfo:
    """Train and save an adapter for the model entry ``spec`` (see the module docstring); returns its metadata."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from timely_llm_ros.core.robot_types import load_robot_types
    from timely_llm_ros.engine.model_setup import prompt_encoder
    from timely_llm_ros.engine.models import weights_folder
    from timely_llm_ros.engine.tokenizer import load_tokenizer
    from timely_llm_ros.engine.transformers.token_choice import eos_ids

    started = time.monotonic()
    if config.threads:
        torch.set_num_threads(config.threads)
    torch.manual_seed(config.seed)
    device = torch.device(config.device)
    precision = resolve_precision(config.precision, device)    # what ran ("auto" resolved), as the run records it
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    folder = weights_folder(spec)
    skill_sets = load_robot_types(config.skills_dir).skill_sets
    examples, report = build_corpus(skill_sets, config.robot_types, config.examples, config.seed, config.skills_dir)
    log.info("corpus: %s", report.describe())

    tokenizer = load_tokenizer(folder)
    prompts, notes = prompt_encoder(spec, tokenizer.has_chat_template, tokenizer.encode_chat, tokenizer.encode,
                                    tokenizer.bos_token_id)
    for note in notes:
        log.warning("%s", note)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa",
                                                 local_files_only=True).to(device)
    stops = eos_ids(tokenizer, model.generation_config)
    if not stops:
        raise ValueError(f"model {spec.name} has no end-of-sequence token: a plan's end cannot be trained")
    eos_id = min(stops)
    encoded = encode_examples(examples, prompts, skill_sets, tokenizer.encode, eos_id)
    for robot, enc in encoded.items():
        mean = sum(len(r) for r in enc.rows) / len(enc.rows)
        log.info("%s: %d examples, shared prompt %d tokens (run every %d steps), %.0f tokens per example", robot,
                 len(enc.rows), len(enc.prefix), config.prefix_refresh, mean)

    if config.init_adapter:
        from peft import PeftModel

        from timely_llm_ros.adapt.adapter import check_adapter

        check_adapter(config.init_adapter, folder, spec.name)
        model = PeftModel.from_pretrained(model, str(config.init_adapter), is_trainable=True)
        lora = model.peft_config["default"]
        config.rank, config.alpha = lora.r, lora.lora_alpha
        config.target_modules = tuple(sorted(lora.target_modules))
        log.info("continuing from adapter %s", config.init_adapter)
    else:
        lora = LoraConfig(r=config.rank, lora_alpha=config.alpha, lora_dropout=config.dropout,
                          target_modules=list(config.target_modules), bias="none", task_type="CAUSAL_LM")
        model = get_peft_model(model, lora)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log.info("LoRA r=%d alpha=%d on %s: %.2fM trainable parameters; forward in %s", config.rank, config.alpha,
             ",".join(config.target_modules), trainable / 1e6, precision)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.learning_rate,
                                  weight_decay=0.0)
    rng = random.Random(config.seed)
    per_epoch = make_batches(encoded, config.batch_size, rng)
    planned = max(1, int(math.ceil(len(per_epoch) * config.epochs)))
    if config.max_steps:
        planned = min(planned, config.max_steps)
    schedule = Schedule(planned, min(config.warmup_steps, planned // 10))
    lr_schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    budget_s = config.minutes * 60.0
    pad_id = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else eos_id

    model.train()
    batches = list(per_epoch)
    loop_start = time.monotonic()
    cpu_start = time.process_time()
    last_log, ema, tokens, seen_tokens, step = loop_start, None, 0, 0, 0
    timed_from, timed_steps = None, 0
    shared: dict[str, tuple[int, list | None]] = {}       # robot type -> (step made, its shared prompt's KV)
    stop = []
    handlers = {sig: signal.signal(sig, lambda *_: stop.append(True)) for sig in (signal.SIGTERM, signal.SIGINT)} \
        if threading_main() else {}

    def run_record(final: bool) -> dict:
        spent = time.monotonic() - loop_start
        return {"steps": step, "seconds": round(spent, 1), "cpu_seconds": round(time.process_time() - cpu_start, 1),
                "tokens_per_s": round(seen_tokens / max(spent, 1e-9), 1),
                "final_loss": round(ema if ema is not None else float("nan"), 4), "device": str(device),
                "threads": torch.get_num_threads() if device.type == "cpu" else None,
                "batch_size": config.batch_size, "learning_rate": config.learning_rate, "precision": precision,
                "prefix_refresh": config.prefix_refresh, "epochs_done": round(step / max(1, len(per_epoch)), 2),
                "continued_from": str(config.init_adapter) if config.init_adapter else None, "final": final}

    last_save = loop_start
    while step < schedule.total and not stop:
        if not batches:
            batches = make_batches(encoded, config.batch_size, rng)
        batch = batches.pop()
        made, kv = shared.get(batch.robot_type, (-config.prefix_refresh, None))
        with autocast:
            if batch.prefix and step - made >= config.prefix_refresh:
                made, kv = step, prefix_kv(model, batch.prefix, device)
                shared[batch.robot_type] = (made, kv)
            loss, n_target, n_tokens = batch_loss(model, batch, kv, device, pad_id)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        optimizer.step()
        lr_schedule.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        tokens += n_tokens
        seen_tokens += n_tokens
        value = float(loss.detach())
        ema = value if ema is None else 0.95 * ema + 0.05 * value
        now = time.monotonic()
        if step == 2:                        # the first step pays one-time costs: time from the second on
            timed_from, timed_steps = now, 0
        elif timed_from is not None:
            timed_steps += 1
        if timed_steps >= 3:
            per_step = (now - timed_from) / timed_steps
            total = steps_in_budget(planned, schedule.total, step, budget_s - (now - loop_start), per_step)
            if (timed_steps == 3 and total < planned) or abs(total - schedule.total) > 0.05 * schedule.total:
                log.info("time budget %.0f min: %d steps fit of the %d planned (%.1f s a step)", config.minutes,
                         total, planned, per_step)
            schedule.total = total
        if now - last_log >= config.log_every_s or step == schedule.total or step == 1:
            rate = tokens / max(1e-9, now - last_log)
            per = (now - loop_start) / step
            log.info("step %d/%d  loss %.3f (mean %.3f)  %.0f tokens/s  elapsed %s  eta %s  (%.1f CPU s a step)",
                     step, schedule.total, value, ema, rate, _clock(now - loop_start),
                     _clock(per * (schedule.total - step)), (time.process_time() - cpu_start) / step)
            last_log, tokens = now, 0
        if now - loop_start > budget_s:
            log.warning("time budget spent after %d steps: saving the adapter as it is", step)
            break
        if config.save_every_min and now - last_save >= 60 * config.save_every_min and step < schedule.total:
            save_adapter(model, spec, folder, config, prompts, skill_sets, report, examples, run_record(False))
            last_save = time.monotonic()
    if stop:
        log.warning("stopped by a signal after %d steps: saving the adapter as it is", step)
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
    training = run_record(True)

    model.eval()
    if config.check_examples and not stop:
        training["check"] = check_plans(model, tokenizer, prompts, skill_sets, config, eos_id, device)
    training["total_seconds"] = round(time.monotonic() - started, 1)
    info = save_adapter(model, spec, folder, config, prompts, skill_sets, report, examples, training)
    return info


def check_plans(model, tokenizer, prompts, skill_sets, config: TrainConfig, eos_id: int, device) -> dict:
    """Greedy plans (no grammar) for fresh draws of the corpus: how many equal the pattern's plan and how many
    parse. A sanity check of the run, not an evaluation (config/eval is the evaluation)."""
    import torch

    examples, _ = build_corpus(skill_sets, config.robot_types, config.check_examples, config.seed + 1_000_003,
                               config.skills_dir)
    exact = parses = 0
    for ex in examples:
        ids = torch.tensor([prompts(skill_sets[ex.robot_type], ex.task, ex.scene)], device=device)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=160,
                                 do_sample=False, eos_token_id=eos_id, pad_token_id=eos_id)
        text = tokenizer.decode(out[0, ids.shape[1]:].tolist()).strip()
        exact += text == ex.plan
        parses += not skill_sets[ex.robot_type].validate_plan(text)
        log.info("check [%s] %s -> %s%s", ex.robot_type, ex.task, text, "" if text == ex.plan else f"  (pattern: "
                 f"{ex.plan})")
    log.info("check: %d/%d plans equal the pattern's, %d/%d parse", exact, len(examples), parses, len(examples))
    return {"examples": len(examples), "exact": exact, "parses": parses}


def save_adapter(model, spec: ModelSpec, folder: Path, config: TrainConfig, prompts, skill_sets, report,
                 examples: Sequence[Example], training: dict) -> AdapterInfo:
    """The LoRA weights in peft's format (in ``config.save_dtype``; the model's own stay as they are, so training
    can go on), timely_adapter.json and the corpus, each file replaced whole."""
    import torch
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[config.save_dtype]
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    state = get_peft_model_state_dict(model, save_embedding_layers=False)
    weights = {k: v.detach().to(dtype).contiguous().cpu() for k, v in state.items()}
    save_file(weights, str(out / "adapter_model.safetensors.part"), metadata={"format": "pt"})
    os.replace(out / "adapter_model.safetensors.part", out / "adapter_model.safetensors")
    peft_config = copy.copy(model.peft_config["default"])
    peft_config.base_model_name_or_path = folder.name              # not this machine's path
    peft_config.inference_mode = True
    peft_config.save_pretrained(str(out))
    if not (out / CORPUS_FILE).is_file() or training.get("final"):
        before = read_jsonl(config.init_adapter / CORPUS_FILE) \
            if config.init_adapter and (config.init_adapter / CORPUS_FILE).is_file() else []
        write_jsonl(list(before) + list(examples), out / CORPUS_FILE)     # every run's examples, in order
    if config.init_adapter:
        training = {**training, "earlier_runs": earlier_runs(config.init_adapter)}
    info = AdapterInfo(
        base=base_identity(folder), model_entry=spec.name,
        robot_types={r: robot_prompt_digest(skill_sets[r], prompts) for r in config.robot_types},
        prompt={"chat_template": bool(prompts.chat), "examples_in": getattr(prompts, "examples_in", None)},
        lora={"rank": config.rank, "alpha": config.alpha, "dropout": config.dropout,
              "target_modules": list(config.target_modules), "dtype": config.save_dtype},
        corpus={"examples": sum(report.per_pattern.values()), "seed": config.seed,
                "per_pattern": dict(sorted(report.per_pattern.items())), "dropped_eval": report.dropped_eval,
                "skills_dir": config.skills_dir},
        training=training)
    info.write(out)
    size = sum(p.stat().st_size for p in out.iterdir()) / 2**20
    log.info("adapter written to %s (%.1f MiB)%s", out, size, "; serve it with `adapter: %s` in the model entry"
             % out if training.get("final") else f" after step {training.get('steps')} (a checkpoint)")
    return info


def main(argv: list[str] | None = None) -> int:
    from timely_llm_ros.core.models import model_spec

    parser = argparse.ArgumentParser(prog="timely_adapt", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2", help="model entry of config/models.yaml (default smollm2)")
    parser.add_argument("--model-path", default="", help="or a model folder / .gguf file (an ad-hoc chat entry)")
    parser.add_argument("--robot", required=True, help="robot types, comma-separated: one adapter serves them all")
    parser.add_argument("--skills-dir", default="", help="a team's folder holding skills/<robot>.yaml and "
                                                         "skills/<robot>.tasks.yaml (as the server's skills_dir)")
    parser.add_argument("--out", default="", help="adapter folder (default build/adapters/<model>-<robots>)")
    parser.add_argument("--minutes", type=float, default=TrainConfig.minutes, help="time budget of the training "
                        "loop (default %(default)s)")
    parser.add_argument("--examples", type=int, default=TrainConfig.examples, help="corpus size (default %(default)s)")
    parser.add_argument("--epochs", type=float, default=TrainConfig.epochs)
    parser.add_argument("--batch-size", type=int, default=TrainConfig.batch_size)
    parser.add_argument("--lr", type=float, default=TrainConfig.learning_rate)
    parser.add_argument("--rank", type=int, default=TrainConfig.rank)
    parser.add_argument("--alpha", type=int, default=TrainConfig.alpha)
    parser.add_argument("--device", default="cpu", help="cpu | cuda")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=0)
    parser.add_argument("--prefix-refresh", type=int, default=TrainConfig.prefix_refresh,
                        help="steps between recomputing a robot type's shared prompt (1: every step, exact)")
    parser.add_argument("--save-every-min", type=float, default=TrainConfig.save_every_min,
                        help="write a checkpoint of the adapter to --out this often (0: only at the end)")
    parser.add_argument("--precision", default=TrainConfig.precision,
                        help="the forward's compute type: bf16, fp32 or auto (default: bf16 where the hardware has it)")
    parser.add_argument("--init-adapter", default="", help="continue training from this adapter (same model)")
    parser.add_argument("--check", type=int, default=TrainConfig.check_examples,
                        help="greedy plans of fresh corpus draws to print after training (0: none)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[timely_adapt] %(message)s")
    spec = ModelSpec.for_path(args.model_path) if args.model_path else model_spec(args.model)
    robots = tuple(r.strip() for r in args.robot.split(",") if r.strip())
    out = Path(args.out) if args.out else Path("build") / "adapters" / f"{spec.name}-{'-'.join(robots)}"
    config = TrainConfig(robots, out, args.skills_dir or None, args.examples, args.epochs, args.minutes,
                         args.batch_size, args.lr, rank=args.rank, alpha=args.alpha, device=args.device,
                         threads=args.threads or None, seed=args.seed, max_steps=args.max_steps or None,
                         prefix_refresh=max(1, args.prefix_refresh), check_examples=args.check,
                         save_every_min=args.save_every_min, precision=args.precision,
                         init_adapter=Path(args.init_adapter) if args.init_adapter else None)
    try:
        train_adapter(spec, config)
    except (ValueError, FileNotFoundError) as exc:
        print(f"timely_adapt: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
