"""The memory budget vLLM's worker takes before the KV cache: each part's arithmetic on a worked
case, checked by hand against vLLM's code, and the budget against every committed start-up log
(``tests/data/logs``; ``memory_inputs.json`` there says what each log is checked with, or why
it is not)."""

from __future__ import annotations

import json
import math
import re

import pytest
from support import CONFIGS, EXAMPLES, REPO

from enginecfg import Pipeline
from enginecfg.pipeline.models import capacity, memory
from enginecfg.pipeline.models.gpus import find_gpu
from enginecfg.pipeline.models.weights import estimate_weights

GIB = 2**30
MIB = 2**20
LOGS = REPO / "tests" / "data" / "logs"
INPUTS = json.loads((LOGS / "memory_inputs.json").read_text())
MEASURED = {e["slug"]: e for e in INPUTS["measured"]}
QWEN72 = LOGS / "vllm-0.19.0-qwen2.5-72b-tp4-l40s"


def _resolve(entry):
    return Pipeline(vllm_version=entry["release"], gpu=entry["gpu"], gpu_validation="off",
                    impact=entry["memory"] or None).resolve(REPO / entry["config"], **entry["engine_args"])


def _logged(slug: str, pattern: str) -> float | None:
    m = re.search(pattern, (LOGS / slug / "start.log").read_text())
    return float(m.group(1)) if m else None


def _qwen72(**memory_options):
    return Pipeline(gpu="L40S", gpu_validation="off", impact=memory_options or None).resolve(
        QWEN72, max_model_len=8192, tensor_parallel_size=4)


# -- each part on a worked case ------------------------------------------------------------------

def test_the_weights_of_one_rank_by_hand():
    """Qwen2.5-72B at tensor parallel size 4, as vLLM stores it on one rank: the vocabulary
    (152,064, already a multiple of 64) split in four for the embeddings and the untied LM head;
    per layer 16 of 64 query heads and 2 of 8 KV heads of 128 for Q, K, V and O; a quarter of the
    gated MLP; the norms whole on every rank."""
    cfg = _qwen72().config
    est = estimate_weights(cfg)
    vocab = 152064 // 4 * 8192
    attention = (8192 * 16 * 128 + 2 * 8192 * 2 * 128 + 16 * 128 * 8192) * 80
    mlp = 3 * 8192 * 29568 // 4 * 80
    norms = 2 * 8192 * 80 + 8192
    assert est.components["embeddings"] == est.components["lm_head"] == 2 * vocab
    assert est.components["attention"] == 2 * attention and est.components["feed-forward"] == 2 * mlp
    assert est.bytes_per_gpu == 2 * (2 * vocab + attention + mlp + norms) == 36_354_670_592
    # vLLM logged "Model loading took 33.98 GiB": inside the estimate's range, 0.35% above its point
    logged = _logged(QWEN72.name, r"Model loading took ([\d.]+) GiB") * GIB
    assert est.low <= logged <= est.high and abs(logged / est.bytes_per_gpu - 1) < 0.005


def test_the_vocabulary_is_padded_to_64_and_kv_heads_replicated_over_ranks():
    # Qwen3.5-27B: 248,320 entries (a multiple of 64); 4 KV heads on 8 ranks: one on each
    one = estimate_weights(Pipeline(gpu_validation="off").resolve(CONFIGS / "qwen3.5-27b").config)
    eight = estimate_weights(Pipeline(gpu_validation="off").resolve(
        CONFIGS / "qwen3.5-27b", tensor_parallel_size=8).config)
    assert eight.components["embeddings"] * 8 == one.components["embeddings"]
    # per attention layer a rank keeps K and V of one head of 256: 2 x 5120 x 256, not a
    # quarter head; 16 attention layers, gated queries (2 x 3 of 24 heads)
    hidden, head = 5120, 256
    per_layer = 2 * hidden * 3 * head + 2 * hidden * 1 * head + 3 * head * hidden
    assert eight.components["attention"] == 2 * 16 * per_layer


def test_mixed_precision_prices_each_kind_of_layer_in_its_own_format():
    """nvidia/Qwen3.6-27B-NVFP4 keeps attention and the linear-attention mixers in FP8 and the
    MLPs in NVFP4 (4-bit values and an fp8 scale per 16: 0.5625 bytes a weight)."""
    cfg = Pipeline(gpu_validation="off").resolve(CONFIGS / "qwen3.6-27b-nvfp4").config
    bf16 = estimate_weights(Pipeline(gpu_validation="off").resolve(CONFIGS / "qwen3.5-27b").config)
    est = estimate_weights(cfg)
    assert est.components["attention"] * 2 == bf16.components["attention"]
    assert est.components["recurrent mixers"] * 2 == bf16.components["recurrent mixers"]
    assert est.components["feed-forward"] == int(bf16.components["feed-forward"] / 2 * 0.5625)
    assert est.components["embeddings"] == bf16.components["embeddings"]
    assert "attention FP8" in est.basis[1] and "feed-forward W4A16_NVFP4" in est.basis[1]


def test_the_profiling_batch_follows_the_card():
    """vLLM 0.19.0's serve defaults: 8192 tokens and 1024 requests on a card of 70 GiB or more
    without "a100" in its name, else 2048 and 256 (``EngineArgs.get_batch_defaults``)."""
    cfg = _qwen72().config
    assert memory.profile_batch(cfg, find_gpu("L40S")) == (2048, 256)
    assert memory.profile_batch(cfg, find_gpu("H200")) == (8192, 1024)
    assert memory.profile_batch(cfg, find_gpu("A100-80GB")) == (2048, 256)


def test_the_capture_sizes_are_those_the_log_names():
    # "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)"
    cfg = _qwen72().config
    tokens, requests = memory.profile_batch(cfg, find_gpu("L40S"))
    sizes = memory.capture_sizes(requests, tokens)
    full = [s for s in sizes if s <= requests]
    logged = re.search(r"PIECEWISE=(\d+) \(largest=(\d+)\), FULL=(\d+) \(largest=(\d+)\)",
                       (QWEN72 / "start.log").read_text()).groups()
    assert (len(sizes), sizes[-1], len(full), full[-1]) == tuple(int(x) for x in logged)
    # a request count of 8 captures sizes 1, 2, 4, 8 and 16 (twice the requests)
    assert memory.capture_sizes(8, 2048) == (1, 2, 4, 8, 16)


def test_the_activation_peak_by_hand():
    """The profiling run on an L40S: 2,048 tokens, 256 requests.  The sampler: 256 x 152,064
    logits at 18 bytes (the model-dtype logits, their float32 copy, the softmax, the exponential
    draw and the quotient), a float32 vocabulary row for each of min(142 multiprocessors, 256)
    Triton programs, and the hidden states of every token and every request; the forward pass:
    per token the residual and hidden state (2 x 8192 x 2) and the MLP's gate/up output and
    activation on one rank (3 x 7392 x 2) with its output (8192 x 2)."""
    part = _qwen72().impact.memory.part("activation_peak")
    sampler = 256 * 152064 * 18 + 142 * 152064 * 4 + (2048 + 256) * 8192 * 2
    forward = 2048 * (2 * 8192 * 2 + (3 * 7392 + 8192) * 2)
    assert part.bytes == max(sampler, forward) == 824_832_000
    assert part.low < part.bytes < part.high and "uncertain" in part.basis[-1]


def test_the_cuda_graph_estimate_by_hand_and_when_it_is_taken():
    imp = _qwen72().impact
    part = imp.memory.part("cuda_graphs")
    per_token = 2 * 8192 * 2 + (3 * 7392 + 8192) * 2
    first = per_token * 512
    rest = 50 * 81 * (3 * MIB // 4) + 34 * MIB
    assert part.bytes == first + rest
    # vLLM 0.19.0 logs "Estimated CUDA graph memory: 2.73 GiB": inside the range
    assert part.low <= 2.73 * GIB <= part.high
    # 0.19.0 subtracts it only under VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 ...
    assert not part.subtracted
    on = _qwen72(estimate_cudagraphs=True).impact.memory
    assert on.part("cuda_graphs").subtracted
    assert imp.memory.kv_cache_memory - on.kv_cache_memory == part.bytes
    # ... and --enforce-eager captures none
    eager = _qwen72(enforce_eager=True, estimate_cudagraphs=True).impact.memory
    assert eager.part("cuda_graphs").bytes == 0 and eager.kv_cache_memory == imp.memory.kv_cache_memory


def test_the_budget_adds_up_and_its_range_is_the_parts_ranges():
    mem = _qwen72().impact.memory
    taken = [p for p in mem.parts if p.subtracted]
    assert [p.name for p in mem.parts] == ["weights", "activation_peak", "non_torch", "cuda_graphs"]
    assert mem.requested_memory == math.ceil(find_gpu("L40S").memory_bytes * 0.9)
    assert mem.kv_cache_memory == mem.requested_memory - sum(p.bytes for p in taken)
    assert mem.kv_cache_memory_low == mem.requested_memory - sum(p.high for p in taken)
    assert mem.kv_cache_memory_high == mem.requested_memory - sum(p.low for p in taken)
    assert mem.available_kv_cache_memory == mem.kv_cache_memory and mem.is_range
    assert set(mem.uncertain) == {"weights", "activation_peak", "non_torch"}
    doc = mem.to_dict()
    assert doc["kv_cache_memory_low"] == mem.kv_cache_memory_low and len(doc["parts"]) == 4
    assert all(p["basis"] for p in doc["parts"])


def test_the_kv_figures_are_given_over_the_range():
    imp = _qwen72().impact
    r = imp.kv_range
    assert r.memory == (imp.memory.kv_cache_memory_low, imp.memory.kv_cache_memory_high)
    assert r.kv_tokens[0] <= imp.kv_tokens <= r.kv_tokens[1]
    assert r.max_concurrency[0] <= imp.max_concurrency <= r.max_concurrency[1]
    # the figures at each end are the figures of that much memory
    low = capacity.impact(_qwen72().config, kv_cache_memory=r.memory[0], gpu="L40S")
    assert (low.num_blocks, low.kv_tokens) == (r.num_blocks[0], r.kv_tokens[0])
    assert imp.to_dict()["kv_range"]["kv_tokens"] == list(r.kv_tokens)


def test_kv_cache_memory_bytes_still_wins():
    imp = _qwen72(kv_cache_memory_bytes=4 * GIB).impact
    assert imp.memory.kv_cache_memory == 4 * GIB and imp.memory.parts == () and imp.kv_range is None
    assert imp.memory.kv_cache_memory_low == imp.memory.kv_cache_memory_high == 4 * GIB
    assert not imp.memory.is_range


def test_the_0_34_budget_subtracts_the_graphs_and_sizes_the_extensible_cache_after_warmup():
    """vLLM 0.34.0 on an H200 at its default utilization (1.0, the extensible KV cache): the
    CUDA graph estimate is taken, and after warmup the cache gets at most the free memory less
    max(1 GiB, 0.75 x the transient peak); the memory in use before the worker's snapshot (0.75
    GiB at one rank) was never free."""
    r = Pipeline(vllm_version="0.34.0", gpu_validation="off").resolve(CONFIGS / "qwen3.5-27b")
    mem = r.impact.memory
    assert mem.requested_memory == find_gpu("H200").memory_bytes  # 1.0
    graphs, act, warm = mem.part("cuda_graphs"), mem.part("activation_peak"), mem.part("warmup_margin")
    assert graphs.subtracted and warm.step == "warmup"
    margin = max(GIB, int(act.bytes * 0.75))
    assert warm.bytes == mem.requested_memory - (find_gpu("H200").memory_bytes - int(0.75 * GIB) - margin)
    assert mem.available_kv_cache_memory - mem.kv_cache_memory == warm.bytes
    profile = [p for p in mem.parts if p.step == "profile"]
    assert mem.available_kv_cache_memory == mem.requested_memory - sum(p.bytes for p in profile)
    # without the extensible cache (a utilization below one keeps the warmup step within reach)
    half = Pipeline(vllm_version="0.34.0", gpu_validation="off", impact={"gpu_memory_utilization": 0.9}).resolve(
        CONFIGS / "qwen3.5-27b").impact.memory
    assert half.part("warmup_margin").bytes == 0 and half.kv_cache_memory == half.available_kv_cache_memory
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0: not subtracted
    off = Pipeline(vllm_version="0.34.0", gpu_validation="off", impact={"estimate_cudagraphs": False}).resolve(
        CONFIGS / "qwen3.5-27b").impact.memory
    assert not off.part("cuda_graphs").subtracted


def test_a_bad_memory_option_names_the_option():
    from enginecfg import InvalidInputError

    with pytest.raises(InvalidInputError, match="estimate_cudagraphs.*VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"):
        Pipeline(gpu_validation="off", impact={"estimate_cudagraphs": "yes"})
    with pytest.raises(InvalidInputError, match="enforce_eager.*--enforce-eager"):
        Pipeline(gpu_validation="off", impact={"enforce_eager": None})


# -- against real starts -------------------------------------------------------------------------

def test_every_committed_log_is_measured_or_says_why_not():
    logs = {p.parent.name for p in LOGS.glob("*/start.log")}
    accounted = set(MEASURED) | set(INPUTS["not_measured"])
    assert logs - accounted == set(), "a committed log the memory budget neither measures nor explains"
    assert set(MEASURED) <= logs


@pytest.mark.parametrize("slug", sorted(MEASURED))
def test_the_budget_against_a_real_start(slug):
    """The available KV memory predicted from the config, the flags and the GPU alone, against
    the one vLLM logged: within 5%, or inside the printed range (logs of a release whose
    arithmetic differs are reported in bench/NOTES.md, not held to it)."""
    entry = MEASURED[slug]
    mem = _resolve(entry).impact.memory
    logged = _logged(slug, r"Available KV cache memory: ([\d.]+) GiB") * GIB
    error = mem.available_kv_cache_memory / logged - 1
    inside = mem.available_kv_cache_memory_low <= logged <= mem.available_kv_cache_memory_high
    weights = _logged(slug, r"Model loading took ([\d.]+) GiB")
    if weights is not None:  # "Model loading took": inside the weights' range, within 2% of its point
        part = mem.part("weights")
        assert part.low <= weights * GIB <= part.high and abs(part.bytes / (weights * GIB) - 1) < 0.02
    graphs = _logged(slug, r"Estimated CUDA graph memory: ([\d.]+) GiB")
    if graphs is not None:  # vLLM's own CUDA graph estimate: inside the part's range
        part = mem.part("cuda_graphs")
        assert part.low <= graphs * GIB <= part.high
    if entry["held_to_5_percent"]:
        assert abs(error) <= 0.05 or inside, f"{slug}: predicted {mem.available_kv_cache_memory / GIB:.2f} GiB " \
                                             f"(range {mem.available_kv_cache_memory_low / GIB:.2f}-" \
                                             f"{mem.available_kv_cache_memory_high / GIB:.2f}), logged {logged / GIB:.2f}"
    else:
        assert entry["why"]


def test_no_kv_memory_names_the_parts_beside_the_weights():
    """On 58 GiB the weights of Qwen3.5-27B (50.9 GiB) fit in what vLLM requests (52.2 GiB), the
    profiling run's peak does not: the finding says so, instead of blaming the weights alone."""
    from enginecfg.commands import explain

    e = explain(str(CONFIGS / "qwen3.5-27b"), gpu_memory_gib=58)
    finding = next(f for f in e.findings if f.id == "no-kv-memory")
    assert "The weights alone" not in finding.message
    assert "activation peak of the profiling run" in finding.message
    assert finding.figures["taken_bytes"] > finding.figures["usable_bytes"] > finding.figures["weights_per_gpu"]


def test_the_graph_part_names_the_release_the_run_speaks_for():
    from enginecfg import Pipeline

    for release in ("0.28.0", "0.34.0"):
        doc = Pipeline(gpu_validation="off", vllm_version=release).resolve(EXAMPLES / "qwen3.5-27b").to_dict()
        text = json.dumps(doc["impact"]["memory"]["parts"])
        assert f"subtracted: vLLM {release} estimates the graphs" in text
