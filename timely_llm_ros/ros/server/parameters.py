"""The server's ROS parameters: declared in one place with descriptions and ranges."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, SetParametersResult
from rclpy.node import Node

from timely_llm_ros.core.policies.catalog import policy_class
from timely_llm_ros.core.skills.program import MAX_PLAN_CALLS

GRAMMAR_MODES = ("auto", "on", "off")   # ROS reads `grammar:=on` as a YAML bool: True/False count as on/off


@dataclass
class ServerParams:
    policy: str = "timely"
    max_batch: int = 8
    engine: str = ""
    model: str = "embedded"
    model_path: str = ""
    model_cache_dir: str = ""
    adapter: str = ""
    grammar: str = "auto"
    device: str = "auto"
    dtype: str = "auto"
    num_threads: int = 0
    kv_budget_mb: float = 0.0
    executor_timeout_s: float = 30.0
    executor_discovery_timeout_s: float = 5.0  # a node joining a running graph can take ~3 s to be seen
    network_delay_s: float = 0.008
    max_task_chars: int = 2000
    max_context_chars: int = 8000
    max_new_tokens: int = 512
    max_plan_calls: int = MAX_PLAN_CALLS
    max_prompt_tokens: int = 2048
    max_queued: int = 256
    result_keep_s: float = 10.0
    urgency_classes_file: str = ""
    state_period_s: float = 0.5
    expected_agents: list = None  # type: ignore[assignment]  (declared as a string array)
    autostart: bool = True
    executor_ack_timeout_s: float = 2.0
    vllm_block_size: int = 32
    vllm_tensor_parallel_size: int = 1
    vllm_pipeline_parallel_size: int = 1
    vllm_max_num_seqs: int = 64
    vllm_distributed_executor_backend: str = ""
    vllm_compile: bool = False
    llamacpp_context_tokens: int = 2560
    llamacpp_flash_attention: str = "on"
    llamacpp_interrupt_poll_s: float = 0.002
    replan_on_failure: int = 0
    log_timing: bool = False
    segment_clients: str = "events"
    kv_store_rows: int = 0
    kv_store_tokens: int = 0
    step_trace_csv: str = ""
    engine_process: bool = False
    skills_dir: str = ""
    health_window_s: float = 60.0
    warn_drop_rate: float = 0.2
    warn_failure_rate: float = 0.2
    starvation_drops: int = 3
    hardware_fit: bool = True
    scale_unmet_classes: float = 0.0
    trace_python_heap: bool = False
    memory_trim_idle_s: float = 1.0


_DESCRIPTIONS = {
    "policy": ("scheduling policy: timely | fcfs | edf | fcfs-stream | fcfs-whole-plan | semantic | timebill | slice "
               "| rtlm, a plug-in's (entry-point group timely_llm_ros.policies), or a preset of timely such as "
               "timely-nointerrupt or edf-admit (docs/scheduling.md); vllm and vllm-stream are the old names of "
               "fcfs-whole-plan and fcfs-stream", None),
    "max_batch": ("maximum generations decoded in one engine step", (1, 256)),
    "engine": ("LLM engine backend: '' (the model entry's: llamacpp for a GGUF entry, transformers for a folder) | "
               "transformers | vllm | llamacpp (vllm and llamacpp: kv_budget_mb sizes their KV pool, default 256)",
               None),
    "model": ("model entry of config/models.yaml: embedded (the project's planner) | smollm2 (SmolLM2-135M-Instruct) "
              "| a team's own entry; model_path, when set, overrides it", None),
    "model_path": ("a local Hugging Face model folder or a .gguf file, instead of a named model entry; empty = use "
                   "`model`", None),
    "model_cache_dir": ("folder of prepared models (a GGUF entry converted once into an HF folder); a model not "
                        "prepared there yet is prepared at configure; empty = $TIMELY_LLM_ROS_MODEL_CACHE, else "
                        "~/.cache/timely_llm_ros/models (the same for a venv and a colcon install)", None),
    "adapter": ("a LoRA adapter folder (timely_adapt) merged into the model's weights, instead of the model entry's "
                "`adapter:`; empty = the entry's; `none` = no adapter", None),
    "grammar": ("grounded decoding: constrain each plan to its robot's skills and scene objects "
                "(core/skills/grammar.py): auto (the model entry's `grammar` field, on for every shipped entry) | on "
                "| off; a goal's `unconstrained` turns it off for that goal", None),
    "device": ("auto | cpu | cuda (auto = cuda when present)", None),
    "dtype": ("auto | float32 | bfloat16 | float16 (auto = float32 on cpu, bfloat16 on cuda)", None),
    "num_threads": ("torch CPU threads for the engine; 0 = torch's default (1 is steadier on a shared 2-core box)",
                    (0, 1024)),
    "kv_budget_mb": ("device KV-cache budget in MB; suspended generations beyond it move to host memory; 0 = unbounded",
                     (0.0, 1e7)),
    "executor_timeout_s": ("seconds past a segment's estimated execution time before its executor counts as lost",
                           (0.1, 3600.0)),
    "executor_discovery_timeout_s": ("seconds to wait for a robot's executor when its first goal arrives", (0.0, 60.0)),
    "network_delay_s": ("expected server-to-robot latency used in execution-end estimates", (0.0, 10.0)),
    "max_task_chars": ("longest task text accepted", (1, 1_000_000)),
    "max_context_chars": ("longest scene/context text accepted", (0, 1_000_000)),
    "max_new_tokens": ("largest max_new_tokens a goal may ask for", (1, 100_000)),
    "max_prompt_tokens": ("longest prompt (tokens) accepted", (16, 1_000_000)),
    "max_queued": ("Plan goals accepted and not yet finished, at most; a goal beyond it ends at once with "
                   "OVERLOADED (41): retry later", (1, 4096)),
    "result_keep_s": ("seconds the server keeps a finished goal (its handle, request and result) so that a client "
                      "can still ask for its result; memory then holds about goal rate x this many goals. rclpy's "
                      "own default depends on the ROS 2 release (900 s before ros2/rclpy#1171, e.g. Humble: a busy "
                      "server then grows for 15 minutes; 10 s in Kilted)", (1.0, 3600.0)),
    "urgency_classes_file": ("YAML of named urgency classes; empty = config/urgency_classes.yaml", None),
    "state_period_s": ("period of the latched ~/state topic", (0.05, 60.0)),
    "expected_agents": ("robot namespaces whose executors are discovered and handshaken at start-up (others on "
                        "their first goal)", None),
    "autostart": ("configure and activate the lifecycle node at start-up (false: wait for a lifecycle manager "
                  "or `ros2 lifecycle set`)", None),
    "executor_ack_timeout_s": ("seconds an executor may take to accept or reject a segment, or to be heard from "
                               "again after its executor_status lost liveliness, before it counts as unavailable "
                               "(EXECUTOR_UNAVAILABLE)", (0.1, 600.0)),
    "vllm_block_size": ("engine vllm: KV block size in tokens (a multiple of 32 on CPU; prefix reuse granularity)",
                        (1, 4096)),
    "vllm_tensor_parallel_size": ("engine vllm: GPUs one model is split across (tensor parallel)", (1, 1024)),
    "vllm_pipeline_parallel_size": ("engine vllm: pipeline stages (GPUs or nodes) of one model", (1, 1024)),
    "vllm_max_num_seqs": ("engine vllm: most generations vLLM holds running at once", (1, 65536)),
    "vllm_distributed_executor_backend": ("engine vllm: vLLM's executor across devices: '' (vLLM decides) | mp | ray",
                                          None),
    "vllm_compile": ("engine vllm: let vLLM compile the model (torch.compile; CUDA graphs on a GPU): shorter steps, "
                     "a slower start (about 30 s more for the embedded planner on a CPU); false = eager", None),
    "llamacpp_context_tokens": ("engine llamacpp: KV cells of each generation's sequence (its longest prompt + output); "
                                "the pool (kv_budget_mb; 0: 16 sequences) holds as many sequences as fit, beyond "
                                "them suspended generations move to host memory", (64, 1_000_000)),
    "llamacpp_flash_attention": ("engine llamacpp: llama.cpp's flash attention: on | off | auto (llama.cpp decides), "
                                 "quoted in YAML; on a 2-core CPU (SmolLM2) off prefills a request 17% faster and "
                                 "on decodes batches of 8-16 8-10% faster (docs/engine.md)", None),
    "llamacpp_interrupt_poll_s": ("engine llamacpp: how often an urgent arrival is weighed while a forward runs "
                                  "(the forward then ends after its graph node in flight)", (0.0001, 1.0)),
    "replan_on_failure": ("replans per request after a failed segment (a new generation whose context names the "
                          "failed skill); 0 = the goal ends EXECUTION_FAILED", (0, 100)),
    "log_timing": ("log 'segment timing <request> <index> published|sent <monotonic s>' per segment (make stress "
                   "measures delivery to the executors with it)", None),
    "segment_clients": ("what spins the per-robot ExecuteSegment clients: events (a node of their own on rclpy's "
                        "EventsExecutor, its own thread) | single (that node on a SingleThreadedExecutor) | server "
                        "(the server node's own executor); see ros/server/client_host.py", None),
    "kv_store_rows": ("engine transformers: rows (generations) of the KV store made at the first generation and "
                      "kept when idle, so its memory pages stay mapped for the next burst (on CPU the store grows "
                      "without copying anyway, inside a reservation of address space); 0 = grow on demand, give "
                      "back when idle", (0, 65536)),
    "kv_store_tokens": ("engine transformers: token columns per row of that reserved store (memory: rows x "
                        "tokens x the model's KV bytes per token)", (0, 1_000_000)),
    "step_trace_csv": ("write one CSV row per engine step to this file (what the step prefilled and decoded, the "
                       "engine's time, the scheduler loop's time around it, the policy); written at configure, "
                       "closed at cleanup or shutdown; core/step_trace.py reads it; empty = no trace", None),
    "engine_process": ("run the engine in a child process of its own (engine/process_engine.py): its forward passes "
                       "then do not share the GIL with this node's threads; false = on the scheduler thread", None),
    "skills_dir": ("a team's folder of skill sets (skills/*.yaml) and execution-time profiles (exec_time/*.yaml), "
                   "added to the package's config/skills and config/exec_time (a file of the same name replaces "
                   "the package's); every skill needs a profile entry or configure fails; empty: the package's only",
                   None),
    "health_window_s": ("/diagnostics judges drop and failure rates, and starving urgency classes, over the "
                        "requests that ended in this many seconds", (1.0, 86400.0)),
    "warn_drop_rate": ("/diagnostics is WARN when more than this share of the requests that ended in the window "
                       "were dropped (with at least 5 ended)", (0.0, 1.0)),
    "warn_failure_rate": ("/diagnostics is WARN when more than this share of the requests that ended in the window "
                          "failed (with at least 5 ended; cancelled ones do not count)", (0.0, 1.0)),
    "starvation_drops": ("an urgency class counts as starving (logged once, WARN on /diagnostics) when at least "
                         "this many of its requests were dropped in the window, and at least half of its requests "
                         "that ended there", (1, 1_000_000)),
    "hardware_fit": ("measure the loaded model on this machine at configure (a few seconds: each robot type's "
                     "request prefill after its cached prompt, decode steps at batch 1 and max_batch) and give the "
                     "policies G, token_time_s, prefill_token_s, decode_seq_ratio and segment lengths derived from "
                     "it (core/fit.py), and check the urgency classes against it; false: the configured constants, "
                     "no check", None),
    "scale_unmet_classes": ("k > 0: an urgency class whose ERT one first segment cannot meet on this engine (the "
                            "hardware fit) is stretched in time so that its ERT becomes k x that segment's time "
                            "(alpha divided by the same factor; logged as a warning); goals with their own "
                            "ert/alpha/beta are never changed; 0 = keep the classes as configured and warn",
                            (0.0, 1000.0)),
    "max_plan_calls": ("a plan's skill calls with its loops unrolled (every conditional's body counted), at most: "
                       "grounded decoding writes no plan beyond it (core/skills/grammar.py); an unconstrained plan "
                       "over it ends INVALID_PLAN at the statement that passes it, counted before anything is "
                       "unrolled (1000{1000{mf(1);}} is 10^6 calls); at most 1000, the cap every robot executor "
                       "enforces itself", (1, MAX_PLAN_CALLS)),
    "trace_python_heap": ("trace the Python heap with tracemalloc from start-up: /diagnostics then shows "
                          "python_heap_mib, what the server's Python objects hold (tensor storage and the middleware's "
                          "memory are not in it); every allocation costs more while it traces (make stress's long "
                          "soak turns it on to tell a Python leak from a native one)", None),
    "memory_trim_idle_s": ("once goals came and the server then held none for this long (s), give the C heap's "
                           "free pages back to the system (glibc malloc_trim), so that resident memory returns to its "
                           "baseline after a burst instead of staying at its high-water mark; 0 = never",
                           (0.0, 3600.0)),
}


def engine_options(p: ServerParams) -> dict:
    """The engine options the server passes to make_engine beyond the common ones (vLLM's, the KV store's)."""
    return {f.name: getattr(p, f.name) for f in fields(ServerParams) if f.name.startswith(("vllm_", "kv_store_", "llamacpp_"))}


_RUNTIME = {"policy", "max_batch", "executor_timeout_s"}


def _descriptor(name: str, default) -> ParameterDescriptor:
    text, rng = _DESCRIPTIONS[name]
    d = ParameterDescriptor(description=text, read_only=name not in _RUNTIME, dynamic_typing=name == "grammar")
    if rng is not None and isinstance(default, int) and not isinstance(default, bool):
        d.integer_range = [IntegerRange(from_value=int(rng[0]), to_value=int(rng[1]), step=1)]
    elif rng is not None and isinstance(default, float):
        d.floating_point_range = [FloatingPointRange(from_value=float(rng[0]), to_value=float(rng[1]), step=0.0)]
    return d


def declare_server_params(node: Node) -> ServerParams:
    """Declare every server parameter (with description and range) and read them."""
    values = {}
    for f in fields(ServerParams):
        default = f.default if f.name != "expected_agents" else [""]
        values[f.name] = node.declare_parameter(f.name, default, _descriptor(f.name, default)).value
    values["expected_agents"] = [a.strip("/") for a in values["expected_agents"] if a.strip("/")]
    if isinstance(values["grammar"], bool):
        values["grammar"] = "on" if values["grammar"] else "off"
    return ServerParams(**values)


def check_runtime_update(values: ServerParams, runtime, params, log: Callable[[str], None] = lambda line: None
                         ) -> SetParametersResult:
    """Validate (and apply) parameter changes: ``values`` the server's parameters (updated here), ``runtime`` its
    ServerRuntime (runtime.py; None while unconfigured: the values are read at the next configure, and a policy
    name is checked now, not only then); ``log`` gets a line for each change applied to a running server."""
    if runtime is None:
        for p in params:
            if p.name == "policy":
                try:
                    policy_class(p.value)
                except ValueError as exc:
                    return SetParametersResult(successful=False, reason=str(exc))
        for p in params:
            if hasattr(values, p.name):
                setattr(values, p.name, p.value)
        return SetParametersResult(successful=True)
    for p in params:
        if p.name == "policy":
            try:
                # composed as configure composed the stack: the engine driven as the new policy drives it
                # (TimeBill's prompt-KV eviction wrapper put in place or taken away)
                switch = runtime.stack.switch_policy(p.value, values.max_batch)
            except ValueError as exc:
                return SetParametersResult(successful=False, reason=str(exc))
            runtime.loop.post(switch.apply)
            log(f"policy {values.policy} -> {p.value} (goals in flight keep their place; the new policy ranks them "
                "from the next step)")
            values.policy = p.value
        elif p.name == "max_batch":
            runtime.loop.post(lambda s, v=int(p.value): setattr(s.policy, "max_batch", v))
            log(f"max_batch {values.max_batch} -> {int(p.value)}")
            values.max_batch = int(p.value)
        elif p.name == "executor_timeout_s":
            runtime.loop.post(lambda s, v=float(p.value): setattr(s.execution, "exec_timeout_s", v))
            log(f"executor_timeout_s {values.executor_timeout_s} -> {float(p.value)}")
            values.executor_timeout_s = float(p.value)
    return SetParametersResult(successful=True)
