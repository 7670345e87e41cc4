"""Train the embedded planner from scratch on the generated corpus (CPU, 2 threads, minutes).

    python -m tools.embedded_planner.train --out models/default_planner

Steps: generate the corpus, train the BPE tokenizer, train a small LlamaForCausalLM with the loss on plan tokens
only, save model + tokenizer (safetensors), measure held-out plan validity and decode speed, write the model card.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from tools.embedded_planner.corpus import generate, split
from tools.embedded_planner.evaluate import Report, evaluate
from tools.embedded_planner.tokenizer import encode_example, train_tokenizer


@dataclass
class TrainConfig:
    """Everything that decides the trained weights."""

    seed: int = 0
    examples: int = 40000
    vocab_size: int = 2048     # upper bound; this corpus saturates near 1k tokens
    hidden: int = 256
    layers: int = 4
    heads: int = 8
    intermediate: int = 768
    max_positions: int = 512
    steps: int = 3000          # upper bound; on a busy 2-core CPU the time budget ends training first
    batch_size: int = 16
    lr: float = 2e-3
    min_lr: float = 1e-4
    warmup: int = 60
    weight_decay: float = 0.05
    threads: int = 2
    max_minutes: float = 13.0   # time budget: the lr schedule compresses to fit it, then training stops
    eval_n: int = 300


def model_config(cfg: TrainConfig, tokenizer) -> LlamaConfig:
    """The planner architecture: a small Llama decoder with tied embeddings."""
    return LlamaConfig(vocab_size=len(tokenizer), hidden_size=cfg.hidden, intermediate_size=cfg.intermediate,
                       num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, num_key_value_heads=cfg.heads,
                       max_position_embeddings=cfg.max_positions, tie_word_embeddings=True, rope_theta=10000.0,
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                       pad_token_id=tokenizer.pad_token_id)


def batches(samples: list[tuple[list[int], int]], batch_size: int, rng: random.Random) -> list[list[int]]:
    """Index batches of similar length (less padding), in random order."""
    order = list(range(len(samples)))
    rng.shuffle(order)
    pool = batch_size * 64
    out: list[list[int]] = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start:start + pool], key=lambda i: len(samples[i][0]))
        out += [chunk[j:j + batch_size] for j in range(0, len(chunk), batch_size)]
    rng.shuffle(out)
    return out


def collate(samples: list[tuple[list[int], int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ids, attention mask and labels (-100 on prompt and padding: loss on plan tokens only)."""
    width = max(len(ids) for ids, _ in samples)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(samples), width), dtype=torch.long)
    labels = torch.full((len(samples), width), -100, dtype=torch.long)
    for row, (seq, n_prompt) in enumerate(samples):
        ids[row, :len(seq)] = torch.tensor(seq)
        mask[row, :len(seq)] = 1
        labels[row, n_prompt:len(seq)] = torch.tensor(seq[n_prompt:])
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def lr_at(step: int, progress: float, cfg: TrainConfig) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay to ``min_lr`` as ``progress`` goes 0 -> 1."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * min(1.0, progress)))


def progress_at(step: int, elapsed_s: float, budget_s: float, cfg: TrainConfig) -> float:
    """Schedule progress: by steps, or by time when the time budget binds first (a busy CPU)."""
    return max((step - cfg.warmup) / max(1, cfg.steps - cfg.warmup), elapsed_s / budget_s)


def decode_ms_per_token(model, tokenizer, prompt: str, tokens: int = 64) -> float:
    """Median time of one single-sequence decode step with KV cache (ms)."""
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    times = []
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        for _ in range(tokens):
            t0 = time.perf_counter()
            out = model(input_ids=nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
            times.append(time.perf_counter() - t0)
    return 1000 * sorted(times)[len(times) // 2]


def generate_ms_per_token(model, tokenizer, prompt: str, tokens: int = 64) -> float:
    """Wall time of ``model.generate`` (batch 1, greedy, prefill included) per generated token (ms)."""
    enc = tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        t0 = time.perf_counter()
        model.generate(**enc, do_sample=False, max_new_tokens=tokens, min_new_tokens=tokens)
    return 1000 * (time.perf_counter() - t0) / tokens


def train(cfg: TrainConfig, out_dir: Path) -> Report:
    """Train, save to ``out_dir`` and return the held-out validity report."""
    t_start = time.perf_counter()
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)

    train_set, heldout = split(generate(cfg.examples, seed=cfg.seed))
    tokenizer = train_tokenizer((f"{e.prompt} {e.plan}" for e in train_set), cfg.vocab_size)
    samples = [encode_example(tokenizer, e.prompt, e.plan) for e in train_set]
    model = LlamaForCausalLM(model_config(cfg, tokenizer))
    n_params = sum(p.numel() for p in model.parameters())
    print(f"corpus: {len(train_set)} train / {len(heldout)} held-out examples; vocab {len(tokenizer)}; "
          f"{n_params / 1e6:.2f} M parameters; mean length {sum(len(s) for s, _ in samples) / len(samples):.0f} tokens")

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    model.train()
    loop_start = time.perf_counter()
    budget_s = max(60.0, cfg.max_minutes * 60 - (loop_start - t_start))
    order: list[list[int]] = []
    steps_run = 0
    bar = tqdm(range(cfg.steps), desc="train", unit="step")
    for step in bar:
        if not order:
            order = batches(samples, cfg.batch_size, rng)
        batch = collate([samples[i] for i in order.pop()], tokenizer.pad_token_id)
        progress = progress_at(step, time.perf_counter() - loop_start, budget_s, cfg)
        if progress >= 1.0:
            print(f"time budget reached after {step} steps")
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(step, progress, cfg)
        loss = model(**batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        bar.set_postfix(loss=f"{loss.item():.3f}")
        steps_run = step + 1
    train_s = time.perf_counter() - t_start  # corpus, tokenizer and training loop
    model.eval()

    out_dir.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(
        do_sample=False, max_new_tokens=200, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.model_max_length = cfg.max_positions
    tokenizer.save_pretrained(out_dir)

    report = evaluate(model, tokenizer, cfg.eval_n)
    probe = heldout[0].prompt
    ms = (decode_ms_per_token(model, tokenizer, probe), generate_ms_per_token(model, tokenizer, probe))
    size_mb = sum(f.stat().st_size for f in out_dir.glob("*.safetensors")) / 1e6
    write_card(out_dir, cfg, report, n_params, len(tokenizer), size_mb, ms, train_s, steps_run)
    print(f"trained in {train_s / 60:.1f} min; held-out valid plans: {report.valid:.1%} of {report.n} "
          f"({report.grammar} grammar; strict {report.valid_strict:.1%}), key object named "
          f"{report.mentions_key:.1%}, exact {report.exact:.1%}; "
          f"decode {ms[0]:.1f} ms/token forward, {ms[1]:.1f} ms/token via generate(); weights {size_mb:.1f} MB")
    return report


def write_card(out_dir: Path, cfg: TrainConfig, r: Report, n_params: int, vocab: int, size_mb: float,
               ms: tuple[float, float], train_s: float, steps_run: int) -> None:
    """The model card README.md with the measured numbers and the exact training configuration."""
    (out_dir / "README.md").write_text(f"""# default_planner

The embedded planner of timely_llm_ros: a {cfg.layers}-layer, {cfg.hidden}-wide LlamaForCausalLM
({n_params / 1e6:.2f} M parameters, fp32 safetensors, {size_mb:.1f} MB) with a {vocab}-token byte-level BPE,
trained from scratch on the generated corpus (tools/embedded_planner/corpus.py: LRTrace-like drone, urgent drone,
arm and chat tasks). It exists so the package plans offline (no model hub); it is not a general LLM.

Prompt: `timely_llm_ros.core.skills.prompt.build_prompt(robot_type, task, context)`; the plan follows after one
space and ends with `<|eos|>`. Greedy decoding (`do_sample=False`).

## Measured (2-core CPU, torch.set_num_threads({cfg.threads}))
- held-out plan validity: **{r.valid:.1%}** of {r.n} greedy plans for unseen (task template, object) pairs parse
  under the skill grammar ({r.grammar} checker) and use only known skills ({r.valid_strict:.1%} also pass the
  stricter built-in checker of tools/embedded_planner/evaluate.py)
- key object of the task named in the plan: {r.mentions_key:.1%}; identical to the reference plan: {r.exact:.1%}
- decode: {ms[0]:.1f} ms per step (one forward with KV cache, batch 1, median);
  {ms[1]:.1f} ms per token through `model.generate` (batch 1, 64 tokens, prefill and Python overhead included)
- training: {train_s / 60:.1f} min, {steps_run} steps of {cfg.batch_size} examples; reproduce with
  `python -m tools.embedded_planner.train --out models/default_planner`. The run is deterministic for a seed and a
  number of steps; when the time budget ends it first (a busy CPU), the step count and so the weights vary.

## Training configuration
```json
{json.dumps(asdict(cfg), indent=2)}
```
""")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("models/default_planner"))
    defaults = TrainConfig()
    for name, value in asdict(defaults).items():
        ap.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    args = vars(ap.parse_args())
    out = args.pop("out")
    train(TrainConfig(**args), out)


if __name__ == "__main__":
    main()
