"""vLLM 0.34.0's worker memory budget, where it differs from 0.19.0's (:mod:`..memory`).

``v1/worker/gpu_worker.py: determine_available_memory`` and ``utils/mem_utils.py:
memory_profiling`` of 0.34.0:

- the CUDA graph estimate is subtracted by default (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``
  defaults to 1 since 0.21.0); the largest capture size is 1024 on data-centre Blackwell;
- what the profiling costs is measured as the drop of the card's free memory from the
  worker's snapshot to the end of the profiling run (``total_consumed``: the weights, every
  allocation that stays, and memory outside torch), plus the transient headroom (the torch
  peak above what stays allocated); the cuBLAS handles are created before the snapshot;
- the logged "Available KV cache memory" is ``requested - total_consumed - headroom - CUDA
  graph estimate``, with ``requested = ceil(total x utilization)`` and the utilization 1.0 by
  default: the extensible KV cache (on unless ``--kv-cache-memory-bytes`` or
  ``--num-gpu-blocks-override`` is given, RULES.md C3.4) reserves that much and is sized again
  after warmup (``v1/worker/extensible_kv_cache.py: measure_kv_cache_bytes``): at most the
  free memory then less a margin of ``max(1 GiB, 0.75 x transient peak)``.  Against the
  logged figure that costs the memory in use before the worker's snapshot (the CUDA context,
  NCCL, the cuBLAS handles: the free memory never held it) and the margin, whenever the
  request reaches into them: the ``warmup`` parts.

The blocks, the "GPU KV cache size" and the concurrency come from the memory after warmup.
"""

from __future__ import annotations

from typing import Any

from enginecfg.pipeline.models import memory as m019
from enginecfg.pipeline.models.memory import GIB, MemoryPart
from enginecfg.pipeline.models.v034 import config_time
from enginecfg.pipeline.models.weights import WeightsEstimate
from enginecfg.pipeline.releases import in_force

__all__ = ["parts", "MARGIN_FLOOR", "MARGIN_FRACTION"]

#: ``KV_CACHE_MARGIN_FLOOR_BYTES`` and ``KV_CACHE_MARGIN_FRACTION`` (CUDA)
MARGIN_FLOOR = GIB
MARGIN_FRACTION = 0.75
#: what the profiling keeps besides the weights and the transient peak (GiB): point, low, high
_KEPT = {1: (0.5, 0.2, 1.2), 2: (0.6, 0.25, 1.5)}
#: memory in use before the worker's snapshot (GiB): the CUDA context (0.51 GiB measured on an
#: H200), the cuBLAS handles (0.16 GiB) and NCCL's buffers with more than one rank
_BASELINE = {1: (0.75, 0.6, 1.2), 2: (1.25, 0.8, 2.5)}
#: on a unified-memory card (DGX Spark) the free memory is the OS's available memory: what the
#: system and its page cache hold counts as in use
_BASELINE_UNIFIED = (12.0, 4.0, 24.0)


def _kept_part(cfg: Any) -> MemoryPart:
    tp = cfg.parallel_config.tensor_parallel_size
    point, low, high = _KEPT[1 if tp == 1 else 2]
    basis = [f"{point:.2f} GiB (range {low:.2f}-{high:.2f}) at tensor parallel size {tp}: what the profiling "
             f"run leaves in use besides the weights (the free memory's drop from the worker's snapshot): the "
             f"runner's persistent buffers, workspaces that stay allocated, the allocator's reserve, kernel "
             f"modules loaded outside torch"]
    return MemoryPart("non_torch", int(point * GIB), int(low * GIB), int(high * GIB), basis)


def _warmup_part(card: Any, cfg: Any, requested: int, activation: MemoryPart) -> MemoryPart:
    """What the extensible KV cache's sizing after warmup takes from the reserved capacity:
    ``max(0, requested - (total - baseline - margin))``."""
    tp = cfg.parallel_config.tensor_parallel_size
    base = _BASELINE_UNIFIED if card.unified else _BASELINE[1 if tp == 1 else 2]

    def taken(baseline_gib: float, transient: int) -> int:
        margin = max(MARGIN_FLOOR, int(transient * MARGIN_FRACTION))
        return max(0, requested - (card.memory_bytes - int(baseline_gib * GIB) - margin))
    point, low, high = taken(base[0], activation.bytes), taken(base[1], activation.low), taken(base[2], activation.high)
    margin = max(MARGIN_FLOOR, int(activation.bytes * MARGIN_FRACTION))
    basis = [f"the extensible KV cache is sized again after warmup to the free memory less a margin of "
             f"max(1 GiB, 0.75 x the transient peak) = {margin / GIB:.2f} GiB; the memory in use before the "
             f"worker's snapshot ({base[0]:.2f} GiB, range {base[1]:.2f}-{base[2]:.2f}: the CUDA context, "
             f"cuBLAS handles{', NCCL' if tp > 1 else ''}"
             f"{'; on unified memory, what the system holds' if card.unified else ''}) "
             f"was never free: together {point / GIB:.2f} GiB of the reserved capacity "
             f"(range {low / GIB:.2f}-{high / GIB:.2f}) the blocks cannot have"]
    return MemoryPart("warmup_margin", point, low, high, basis, step="warmup")


def parts(cfg: Any, card: Any, weights: WeightsEstimate, specs: dict, *, requested: int, extensible: bool,
          estimate_cudagraphs: bool | None = None, enforce_eager: bool = False,
          release: Any = None) -> tuple[MemoryPart, ...]:
    """vLLM 0.34.0's parts on *card* (see the module doc); *estimate_cudagraphs*: the
    environment switch (None: vLLM's default, on); *release* the one whose batch defaults apply."""
    tokens = config_time.max_num_batched_tokens(cfg, card, release)
    requests = min(config_time.max_num_seqs(cfg, card, release), tokens)
    on = estimate_cudagraphs is None or bool(estimate_cudagraphs)
    activation = m019.activation_part(cfg, card, specs, tokens, requests)
    graphs = m019.cuda_graph_part(
        cfg, specs, tokens, requests, subtracted=on, enforce_eager=enforce_eager,
        largest=1024 if card.capability[0] == 10 else 512,
        why=(f"subtracted: vLLM{'' if release is None else f' {release}'} estimates the graphs before sizing the KV cache "
             f"({m019.ESTIMATE_CUDAGRAPHS_ENV} defaults to 1)" if on else
             f"not subtracted: {m019.ESTIMATE_CUDAGRAPHS_ENV}=0"))
    # K9b (0.27.0): what stays besides the weights is the free memory's drop over the profiling
    # (total_consumed); before it, the memory outside torch that appeared since the worker's snapshot
    kept = _kept_part(cfg) if in_force(release, "K9b") else m019.non_torch_part(cfg, card)
    out = [m019.weights_part(weights), activation, kept, graphs]
    if extensible:
        out.append(_warmup_part(card, cfg, requested, activation))
    return tuple(out)
