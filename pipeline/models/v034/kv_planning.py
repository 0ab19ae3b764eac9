"""vLLM 0.34.0's KV-cache planning (RULES.md K1-K7), in plain Python.

0.34.0 moved the planning to ``v1/core/kv_cache_planning.py`` and changed its arithmetic:

- K1: the layers declare their specs at the start-up block sizes (a sliding-window layer takes
  the largest kernel block of its backend that divides the primary block); Mamba layers at
  the start-up Mamba block size and padded page, with one prefill-checkpoint block per request
  in 'align' mode where the mixer exports checkpoints;
- K2: layers of one *type* share one group even with different shapes (G2: the group's page
  is the sum of its layers' pages); otherwise pages are unified (a smaller attention page that
  divides the largest grows its block, any other page is padded) and the layers bucketed;
- K3: a block is as many bytes as the largest group's pages together;
- K4-K6: a request needs, per group, its blocks at the context length; concurrency is the
  blocks over one request's blocks, and the logged "GPU KV cache size" is
  ``int(concurrency x max_model_len)``; the engine block size is the smallest group block;
- K7: the not-enough-memory check (one block held back), its text and the length estimate;
- ``num_gpu_blocks_override`` (``get_kv_cache_configs``): when given, the KV-cache memory the
  planning works with is the override's blocks at the pool's bytes per block (probed with the
  override suppressed), *before* the null-block reservation and the not-enough-memory check:
  the check, the length estimate, the block count (the override itself) and the concurrency
  all follow from it; what the memory would have given is kept as ``blocks_from_memory``
  (the number vLLM logs as "Overriding num_gpu_blocks=...").

:func:`groups` plans the groups of a config from its start-up decision
(:class:`~enginecfg.pipeline.models.startup.Startup`); :func:`impact` gives the same
:class:`~enginecfg.pipeline.models.capacity.Impact` value as 0.19.0's figures, with 0.34.0's
arithmetic.  Checked against every built public case of vLLM 0.34.0 at 2, 17, 64 and 500 GiB
(``tests/data/vllm-0.34.0``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from enginecfg.pipeline.errors import ConfigRejectedError
from enginecfg.pipeline.hf import ContentMemo, memoised
from enginecfg.pipeline.models import capacity
from enginecfg.pipeline.models import kv_cache as kc
from enginecfg.pipeline.models import kv_specs
from enginecfg.pipeline.models.kv_cache import cdiv
from enginecfg.pipeline.models.capacity import (BlockRounding, GroupFigures, Impact, KVRange, MambaPadding,
                                                MemoryBudget, Padding)
from enginecfg.pipeline.models.v034 import backends as be
from enginecfg.pipeline.models.v034 import config_time
from enginecfg.pipeline.models.v034 import startup as st
from enginecfg.pipeline.releases import in_force

__all__ = ["Layer", "Group", "Plan", "layer_specs", "groups", "plan", "impact", "not_enough_memory", "startup_key",
           "gpu_key", "FIGURES", "GROUPS"]

#: the figures of configs seen before in this process (pure in the config and its options)
FIGURES = ContentMemo(maxsize=256)
#: the KV-cache groups of configs seen before, by start-up decision and card
GROUPS = ContentMemo(maxsize=256)

_CONSERVING = "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."


@dataclass(frozen=True)
class Layer:
    """One layer's KV-cache spec with the extra Mamba blocks it takes per request."""

    name: str
    spec: Any
    checkpoint_blocks: int = 0

    @property
    def page(self) -> int:
        return self.spec.page_size_bytes

    def key(self) -> tuple:
        return (self.spec, self.checkpoint_blocks)


@dataclass(frozen=True)
class Group:
    """One KV-cache group: its layers, and ``uniform`` for a G2 group (one group of layers of
    one type with different shapes; its page is the sum of theirs)."""

    layers: tuple[Layer, ...]
    uniform: bool = False

    @property
    def spec(self) -> Any:
        return self.layers[0].spec

    @property
    def block_size(self) -> int:
        return self.spec.block_size

    @property
    def bytes_per_block(self) -> int:
        return sum(layer.page for layer in self.layers)

    def blocks_per_request(self, length: int, in_flight: int, mode: str, rules: Any = None) -> int:
        layers = self.layers if self.uniform else self.layers[:1]
        return max(_blocks(layer, length, in_flight, mode, rules) for layer in layers)


def _blocks(layer: Layer, length: int, in_flight: int, mode: str, rules: Any = None) -> int:
    """K4: the blocks one request of *length* tokens takes in a layer (*rules*: the release,
    None for the latest).  A Mamba layer in 'all' mode, until K4e (0.32.0) took that mode
    away, keeps a block per *length* tokens, plus the speculative ones from K4a (0.22.0)."""
    s = layer.spec
    if isinstance(s, kc.MambaSpec):
        if mode == "all" and not in_force(rules, "K4e"):
            return cdiv(length, s.block_size) + (s.num_speculative_blocks if rules.has("K4a") else 0)
        if mode == "align":
            return 2 + s.num_speculative_blocks + layer.checkpoint_blocks
        return 1 + s.num_speculative_blocks
    if isinstance(s, kc.SlidingWindowSpec):
        return cdiv(min(s.sliding_window - 1 + in_flight, length), s.block_size) + 1
    return cdiv(length, s.block_size)


def _sw_block(blocks: tuple[tuple[int, bool], ...], block: int, rules: Any = None) -> int:
    """K1: a sliding-window layer's block: the largest kernel block of its backend within the
    primary block that divides it (``MultipleOf`` backends: the primary block itself) since K1c
    (0.34.0); from K1b (0.30.0) the largest within it; from K1a (0.25.0) the smallest kernel
    block (*rules*: the release, None for the latest)."""
    if not blocks:
        return block
    if not in_force(rules, "K1b"):
        fixed = [s for s, multiple in blocks if not multiple]
        return min(fixed or [s for s, _ in blocks])
    candidates = [s for s, multiple in blocks if not multiple]
    candidates += [max(s, block // s * s) for s, multiple in blocks if multiple]
    fitting = [b for b in candidates if b <= block]
    dividing = [b for b in fitting if block % b == 0]
    dividing += [b for s, multiple in blocks if multiple for b in range(s, block + 1, s) if block % b == 0]
    if dividing and in_force(rules, "K1c"):
        return max(dividing)
    return max(fitting) if fitting else min(candidates)


def layer_specs(cfg: Any, startup: Any, gpu: Any) -> list[Layer]:
    """K1: every layer's spec at the start-up block sizes, in layer order."""
    cc = cfg.cache_config
    specs = kv_specs.layer_specs(cfg, block_size=startup.block_size)
    ctx = st.context(cfg, gpu)
    backend_of = {lb.layer.first_layer: lb.backend for lb in startup.backends}
    sw_backend = next((lb.backend for lb in startup.backends
                       if lb.layer.sliding_window is not None and lb.backend is not None), None)
    ckpt = st.checkpoint_blocks(cfg, gpu, startup.rules)
    out = []
    for name, spec in specs.items():
        if isinstance(spec, kc.MambaSpec):
            mbs = startup.mamba_block_size if startup.mamba_block_size is not None else spec.block_size
            spec = replace(spec, block_size=mbs, page_size_padded=startup.mamba_page_size_padded,
                           mamba_cache_mode=cc.mamba_cache_mode)
            out.append(Layer(name, spec, ckpt if cc.mamba_cache_mode == "align" else 0))
            continue
        # K1a (0.25.0): the window layer picks its own kernel block; before it, the start-up block
        if isinstance(spec, kc.SlidingWindowSpec) and startup.rules.has("K1a"):
            backend = backend_of.get(name, sw_backend)
            if backend in be.BACKENDS:
                kv = cc.cache_dtype
                spec = replace(spec, block_size=_sw_block(be.kernel_blocks(backend, ctx, spec.head_size, kv),
                                                          startup.block_size, startup.rules))
        out.append(Layer(name, spec))
    return out


def _same_type(layers: Sequence[Layer]) -> bool:
    """G2: one block size, and all full attention, or all sliding window with one window, or
    all Mamba with equal pages and extra blocks."""
    specs = [layer.spec for layer in layers]
    if len({s.block_size for s in specs}) > 1:
        return False
    first = specs[0]
    if type(first) in (kc.FullAttentionSpec, kc.MLAAttentionSpec):
        return all(type(s) is type(first) for s in specs)
    if isinstance(first, kc.SlidingWindowSpec):
        return all(isinstance(s, kc.SlidingWindowSpec) and s.sliding_window == first.sliding_window for s in specs)
    if isinstance(first, kc.MambaSpec):
        return all(isinstance(s, kc.MambaSpec) and s.page_size_bytes == first.page_size_bytes
                   and s.num_speculative_blocks == first.num_speculative_blocks
                   and layer.checkpoint_blocks == layers[0].checkpoint_blocks for s, layer in zip(specs, layers))
    return False


def _full(s: kc.SlidingWindowSpec, block: int) -> kc.FullAttentionSpec:
    return kc.FullAttentionSpec(block_size=block, num_kv_heads=s.num_kv_heads, head_size=s.head_size,
                                dtype=s.dtype, page_size_padded=s.page_size_padded)


def _unify_hybrid(layers: list[Layer]) -> tuple[list[Layer], list[tuple[str, str]]]:
    """G-1: ``--disable-hybrid-kv-cache-manager``: sliding-window layers become full attention."""
    if len({layer.key() for layer in layers}) <= 1 or _same_type(layers):
        return layers, []
    messages = [("WARNING", "Hybrid KV cache manager is disabled for this hybrid model, This means we do not "
                            "enable any optimizations for saving KV cache memory (e.g., dropping the KV cache "
                            "outside the sliding window). The compute of layers like sliding window is still "
                            "saved.")]
    full = {layer.spec.block_size for layer in layers if type(layer.spec) is kc.FullAttentionSpec}
    if full and any(isinstance(layer.spec, kc.SlidingWindowSpec) for layer in layers):
        block = next(iter(full)) if len(full) == 1 else None
        layers = [Layer(layer.name, _full(layer.spec, block or layer.spec.block_size))
                  if isinstance(layer.spec, kc.SlidingWindowSpec) else layer for layer in layers]
    if not (len({layer.key() for layer in layers}) <= 1 or _same_type(layers)):
        raise ConfigRejectedError("Hybrid KV cache manager is disabled but failed to convert the KV cache specs "
                                  "to one unified type.", field="scheduler_config.disable_hybrid_kv_cache_manager",
                                  vllm_type="ValueError")
    return layers, messages


def _unify_pages(layers: list[Layer], rules: Any = None) -> list[Layer]:
    """G4: every page becomes the largest one: a smaller attention page that divides it grows
    its block, any other page is padded to it; before G4a (0.24.0, *rules* the release, None for
    the latest) an attention page that does not divide the largest is refused, not padded."""
    top = max(layer.page for layer in layers)
    out = []
    for layer in layers:
        s, page = layer.spec, layer.page
        if page != top:
            if isinstance(s, kc.MambaSpec):
                s = replace(s, page_size_padded=top)
            elif top % page == 0:
                s = replace(s, block_size=s.block_size * (top // page))
            elif isinstance(s, kc.MLAAttentionSpec) or not in_force(rules, "G4a"):
                raise ConfigRejectedError("The page size of the layer is not divisible by the maximum page size. "
                                          "Cannot unify by adjusting block_size.", field="cache_config.block_size",
                                          vllm_type="NotImplementedError")
            else:
                s = replace(s, page_size_padded=top)
        out.append(Layer(layer.name, s, layer.checkpoint_blocks))
    return out


def _merge_key(layer: Layer) -> tuple:
    """G5: full-attention specs that differ only in their window or chunk share a bucket."""
    s = layer.spec
    if type(s) is kc.FullAttentionSpec:
        s = replace(s, sliding_window=None, attention_chunk_size=None)
    return (s, layer.checkpoint_blocks)


@dataclass(frozen=True)
class Plan:
    """The groups and what the planning logs (the padding-layer warning, the hybrid-manager one)."""

    groups: tuple[Group, ...]
    messages: tuple[tuple[str, str], ...] = ()


def groups(cfg: Any, startup: Any, gpu: Any) -> Plan:
    """K2: the KV-cache groups of *cfg* at its start-up decision on *gpu*.

    Worked out once per config content, start-up decision and card (:data:`GROUPS`): the
    ``engine-start`` stage and ``impact`` of one run ask for the same groups."""
    from enginecfg.pipeline.models.gpus import Gpu

    card = Gpu(gpu.name, gpu.memory_bytes, tuple(gpu.capability), gpu.device_name)
    return _groups(cfg, startup=startup_key(startup), gpu=card)


@memoised(GROUPS)
def _groups(cfg: Any, *, startup: tuple, gpu: Any) -> Plan:
    start = _StartupView(*startup)
    layers = layer_specs(cfg, start, gpu)
    messages: list[tuple[str, str]] = []
    if start.disable_hybrid_kv_cache_manager:
        layers, messages = _unify_hybrid(layers)
    if not layers:
        return Plan((), tuple(messages))
    if len({layer.key() for layer in layers}) == 1:
        return Plan((Group(tuple(layers)),), tuple(messages))
    if _same_type(layers):
        return Plan((Group(tuple(layers), uniform=True),), tuple(messages))
    layers = _unify_pages(layers, start.rules)
    buckets: dict[tuple, list[Layer]] = {}
    for layer in layers:
        buckets.setdefault(_merge_key(layer), []).append(layer)
    counts = [len(b) for b in buckets.values()]
    size = min(counts)
    if max(counts) < size * 1.5:
        size = max(counts)
    out: list[Group] = []
    for bucket in buckets.values():
        padding = size - len(bucket) % size
        if padding != size:  # one warning per bucket, its padding over its layers
            messages.append(("WARNING", f"Add {padding} padding layers, may waste at most "
                                        f"{padding / len(bucket) * 100:.2f}% KV cache memory"))
        n = cdiv(len(bucket), size)
        out += [Group(tuple(bucket[i::n])) for i in range(n)]
    return Plan(tuple(out), tuple(messages))


def _fmt(n: int) -> str:
    return f"{round(n / 2**30, 2)}"


def _hint(extensible: bool, utilization: float | None, wording: str = "K7b") -> str:
    if wording != "K7b":  # before K7b: one hint, K7a's (the CPU backend named) or 0.19.0's
        cpu = " (which also controls CPU memory on the CPU backend)" if wording == "K7a" else ""
        return (f"Try increasing `gpu_memory_utilization`{cpu} or decreasing `max_model_len` when initializing "
                "the engine.")
    if extensible:
        if utilization is not None and utilization < 1.0:
            return ("The KV cache gets what is left after the model and its activations within "
                    f"`gpu_memory_utilization`={utilization}; increase it (with the extensible KV cache it "
                    "defaults to 1.0) or decrease `max_model_len` or `max_num_seqs`.")
        return ("The extensible KV cache already takes all device memory left after the model and its "
                "activations; decrease `max_model_len` or `max_num_seqs`, or the model needs a device with "
                "more memory.")
    return ("Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU "
            "memory reservation on the CPU backend, despite its name).")


def not_enough_memory(needed: int, usable: int, max_model_len: int, estimate: int, *, extensible: bool,
                      utilization: float | None = None, wording: str = "K7b") -> str:
    """K7's text when one request of max_model_len does not fit, in the words of the latest K7
    rule in force (*wording*: ``"K7b"``, ``"K7a"``, or ``""`` for 0.19.0's)."""
    part = (f"Based on the available memory, the estimated maximum model length is {estimate}. "
            if estimate > 0 else "")
    model = "models's" if not wording else "model's"
    tail = " Decreasing `max_model_len` also reduces what is needed." if wording == "K7b" else ""
    return (f"To serve at least one request with the {model} max seq len ({max_model_len}), ({_fmt(needed)} GiB "
            f"KV cache is needed, which is larger than the available KV cache memory ({_fmt(usable)} GiB). "
            f"{part}{_hint(extensible, utilization, wording)}{tail} "
            f"{_CONSERVING}")


def plan(cfg: Any, startup: Any, gpu: Any) -> tuple[Plan, int, Any]:
    """The groups, the bytes of one block, and ``R(length)``: the blocks one request takes."""
    if not isinstance(startup, _StartupView):
        startup = _StartupView(*startup_key(startup))
    p = groups(cfg, startup, gpu)
    bpb = max((g.bytes_per_block for g in p.groups), default=0)
    pp = cfg.parallel_config.pipeline_parallel_size
    mnbt = config_time.max_num_batched_tokens(cfg, gpu, startup.rules)
    rules = startup.rules
    # K4b: a sliding window holds the tokens in flight, (pp + 1 if async else pp) steps of the budget;
    # before it one step's budget
    in_flight = (pp + 1 if config_time.async_scheduling(cfg) else pp) * mnbt \
        if in_force(rules, "K4b") else mnbt
    mode = cfg.cache_config.mamba_cache_mode

    def per_request(length: int) -> int:
        return sum(g.blocks_per_request(length, in_flight, mode, rules) for g in p.groups)
    return p, bpb, per_request


_KINDS = {kc.MLAAttentionSpec: "mla", kc.FullAttentionSpec: "full_attention",
          kc.SlidingWindowSpec: "sliding_window", kc.MambaSpec: "mamba"}


def _figures(g: Group, per_request_one: int) -> GroupFigures:
    s = g.spec
    n = len(g.layers)
    if g.uniform:
        return GroupFigures("uniform", n, s.block_size, g.bytes_per_block,
                            bytes_per_token=g.bytes_per_block // s.block_size)
    kind = _KINDS[type(s)]
    if kind == "mamba":
        return GroupFigures(kind, n, s.block_size, s.page_size_bytes, mamba_type=s.mamba_type,
                            state_bytes=s.real_page_size_bytes, bytes_per_request=per_request_one * g.bytes_per_block)
    return GroupFigures(kind, n, s.block_size, s.page_size_bytes, bytes_per_token=g.bytes_per_block // s.block_size,
                        sliding_window=s.sliding_window if kind == "sliding_window" else None,
                        num_kv_heads=s.num_kv_heads, head_size=s.head_size, dtype=s.dtype)


@memoised(FIGURES)
def impact(cfg: Any, *, startup: tuple, gpu: tuple, gpu_memory_gib: float = capacity.H200_GIB,
           gpu_memory_utilization: float = 1.0, kv_cache_memory: int | None = None,
           contexts: Sequence[int] = capacity.DEFAULT_CONTEXTS, extensible: bool = True,
           num_gpu_blocks_override: int | None = None, estimate_cudagraphs: bool | None = None,
           enforce_eager: bool = False, wording: str = "K7b") -> Impact:
    """0.34.0's KV-cache figures of a resolved config: *startup* is ``(block_size,
    mamba_block_size, mamba_page_size_padded, disable_hybrid_kv_cache_manager, backends)``
    (:func:`startup_key`), *gpu* ``(name, device name, memory bytes, capability)``;
    *num_gpu_blocks_override* is ``--num-gpu-blocks-override`` (see the module doc); *wording* the
    not-enough-memory text's (:func:`not_enough_memory`)."""
    from enginecfg.pipeline.models.gpus import Gpu

    card = Gpu(gpu[0], gpu[2], tuple(gpu[3]), gpu[1])
    start = _StartupView(*startup)
    mc, cc = cfg.model_config, cfg.cache_config
    mml = mc.max_model_len
    p, bpb, per_request = plan(cfg, start, card)
    if kv_cache_memory:  # 0 reads as unset: the worker measures the memory, as in 0.19.0
        budget = MemoryBudget(int(gpu_memory_gib * 2**30), gpu_memory_utilization, int(kv_cache_memory),
                              "--kv-cache-memory", None, gpu=card.name, kv_cache_memory_bytes=int(kv_cache_memory),
                              num_gpu_blocks_override=num_gpu_blocks_override)
    else:
        from enginecfg.pipeline.models.v034 import memory
        from enginecfg.pipeline.models.weights import estimate_weights

        specs = kv_specs.layer_specs(cfg, block_size=start.block_size)
        weights = estimate_weights(cfg, specs)
        requested = capacity.requested_memory(card.memory_bytes, gpu_memory_utilization)
        parts = memory.parts(cfg, card, weights, specs, requested=requested, extensible=extensible,
                             estimate_cudagraphs=estimate_cudagraphs, enforce_eager=enforce_eager,
                             release=start.rules)
        budget = capacity.budget_from_parts(card, gpu_memory_utilization, requested, parts, weights,
                                            gpu=card.name, num_gpu_blocks_override=num_gpu_blocks_override,
                                            kv_cache_memory_bytes=kv_cache_memory)
    available = budget.kv_cache_memory
    mnbt = config_time.max_num_batched_tokens(cfg, card, start.rules)
    if not p.groups:
        return Impact(memory=budget, max_model_len=mml, max_num_batched_tokens=mnbt, groups=(), num_blocks=0,
                      kv_tokens=0, max_concurrency=None, concurrency={}, max_model_len_fits=mml, fits=None,
                      bytes_per_token=0, min_request_bytes=0, request_bytes=None, padding=None, block_rounding=None,
                      prefix_cache_granularity=None, note="no layer keeps KV cache (attention-free or encoder-only)")
    blocks_from_memory = None
    # K5a (0.20.1): with the override the check and the length estimate plan against the override's
    # blocks; before it against the memory, the override replacing only the block count
    checked = available
    if num_gpu_blocks_override is not None:
        # the planned memory is the override's blocks; the check below holds one of them back
        blocks_from_memory = available // bpb
        available = num_gpu_blocks_override * bpb
        checked = available if start.rules.has("K5a") else checked
    # K11: the check holds back the null block the block pool keeps (before it: the whole budget)
    usable = checked - bpb if start.rules.has("K11") else checked
    blocks = max(available // bpb, 0)

    def fits(length: int) -> bool:
        return bpb * per_request(length) <= usable
    estimate = kc.largest_fitting(fits, mml)
    needed = bpb * per_request(mml)
    if usable <= 0:
        # (before K7b the hint is 0.19.0's; how K7a worded this line was not seen run)
        hint = _hint(extensible, None) if wording == "K7b" else \
            "Try increasing `gpu_memory_utilization` when initializing the engine."
        error = f"No available memory for the cache blocks. {hint} {_CONSERVING}"
    elif needed > usable:
        error = not_enough_memory(needed, usable, mml, estimate, extensible=extensible,
                                  utilization=None if extensible and kv_cache_memory is None
                                  else gpu_memory_utilization, wording=wording)
    else:
        error = None
    concurrency = blocks / per_request(mml)

    def logged_tokens(n: int) -> int:
        """The logged "GPU KV cache size": floor(concurrency x max_model_len) since K6a (0.20.1);
        before it the blocks over the groups, times the smallest group block."""
        if in_force(start.rules, "K6a"):
            return int(n / per_request(mml) * mml)
        return n // len(p.groups) * min(g.block_size for g in p.groups)
    mamba = [g.spec for g in p.groups if isinstance(g.spec, kc.MambaSpec)]
    pad = None
    if mamba:
        m = mamba[0]
        extra = m.page_size_bytes - m.real_page_size_bytes
        pad = MambaPadding(m.real_page_size_bytes, m.page_size_bytes, extra,
                           round(100.0 * extra / m.real_page_size_bytes, 2) if m.real_page_size_bytes else 0.0)
    size = max(len(g.layers) for g in p.groups)
    pad_layers = 0 if p.groups[0].uniform else sum(size - len(g.layers) for g in p.groups)
    layers = sum(len(g.layers) for g in p.groups)
    attention = [g.block_size for g in p.groups if not isinstance(g.spec, kc.MambaSpec)]
    rows = [_figures(g, _blocks(g.layers[0], 1, 0, cc.mamba_cache_mode, start.rules)) for g in p.groups]
    kv_range = None
    if budget.is_range:
        def at(memory: int) -> tuple:
            planned = num_gpu_blocks_override * bpb if num_gpu_blocks_override is not None else memory
            n = max(planned // bpb, 0)
            if not start.rules.has("K5a"):  # before K5a the check reads the memory
                planned = memory
            est = 0
            if bpb * per_request(1) <= planned - bpb:
                lo_, hi_, est = 1, mml, 1
                while lo_ <= hi_:
                    mid = (lo_ + hi_) // 2
                    if bpb * per_request(mid) <= planned - bpb:
                        est, lo_ = mid, mid + 1
                    else:
                        hi_ = mid - 1
            conc = n / per_request(mml)
            return (n, logged_tokens(n), conc, {c: (n / per_request(c) if c <= mml else None) for c in contexts}, est,
                    planned - bpb > 0 and needed <= planned - bpb)
        lo, hi = at(budget.kv_cache_memory_low), at(budget.kv_cache_memory_high)
        kv_range = KVRange((budget.kv_cache_memory_low, budget.kv_cache_memory_high), (lo[0], hi[0]), (lo[1], hi[1]),
                           (lo[2], hi[2]), {c: (None if lo[3][c] is None else (lo[3][c], hi[3][c])) for c in contexts},
                           (lo[4], hi[4]), (lo[5], hi[5]))
    return Impact(
        memory=budget, max_model_len=mml, max_num_batched_tokens=mnbt, groups=rows, num_blocks=blocks,
        kv_tokens=logged_tokens(blocks), max_concurrency=concurrency,
        concurrency={n: blocks / per_request(n) if n <= mml else None for n in contexts},
        max_model_len_fits=estimate, fits=error, starts=error is None, start_error=error,
        bytes_per_token=sum(r.bytes_per_token or 0 for r in rows),
        min_request_bytes=bpb * per_request(1), request_bytes=needed,
        padding=Padding(pad, pad_layers, round(100.0 * pad_layers / layers, 2) if layers else 0.0),
        block_rounding=BlockRounding(available - blocks * bpb,
                                     round(100.0 * (available - blocks * bpb) / available, 2) if available else 0.0),
        prefix_cache_granularity=(min(attention) if attention else cc.mamba_block_size)
        if cc.enable_prefix_caching else None,
        blocks_from_memory=blocks_from_memory, kv_range=kv_range)


@dataclass(frozen=True)
class _StartupView:
    """The start-up decisions the planning reads, rebuilt from :func:`startup_key`."""

    block_size: int
    mamba_block_size: int | None
    mamba_page_size_padded: int | None
    disable_hybrid_kv_cache_manager: bool
    backend_rows: tuple
    release: str | None = None

    @property
    def rules(self) -> Any:
        """The release the start-up step was worked out for (the latest where none is named)."""
        from enginecfg.pipeline import releases

        return releases.get(self.release) if releases.known(self.release) else releases.last()

    @property
    def backends(self) -> list:
        return [_Backend(_Kind(first, window), backend) for first, window, backend in self.backend_rows]


@dataclass(frozen=True)
class _Kind:
    first_layer: str
    sliding_window: int | None


@dataclass(frozen=True)
class _Backend:
    layer: _Kind
    backend: str | None


def startup_key(startup: Any) -> tuple:
    """The parts of a :class:`~enginecfg.pipeline.models.startup.Startup` the planning reads,
    as plain values (the figures are memoised by them)."""
    return (startup.block_size, startup.mamba_block_size, startup.mamba_page_size_padded,
            bool(startup.disable_hybrid_kv_cache_manager),
            tuple((lb.layer.first_layer, lb.layer.sliding_window, lb.backend) for lb in startup.backends),
            startup.release)


def gpu_key(gpu: Any) -> tuple:
    return (gpu.name, gpu.device_name, gpu.memory_bytes, tuple(gpu.capability))
