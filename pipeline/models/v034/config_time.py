"""vLLM 0.34.0's config-time knowledge where it differs from 0.19.0 (RULES.md C1-C11).

- C1: architectures that left the registry resolve to the Transformers backend (not hybrid);
  a hybrid class is not hybrid when every ``layer_types`` entry is ``attention`` or
  ``full_attention``; multimodal prefix-LM models (Gemma 4 ``ForConditionalGeneration``);
- C3: the default block size (64), prefix caching on for generative hybrids, the scheduler's
  token budget and sequence count by the GPU's memory and name, asynchronous scheduling;
- C4: Gemma 4's FlashAttention-4 rule;
- C5: NemotronH's SSM-state fallback (float32);
- C7: the Mamba cache mode follows prefix caching alone;
- C9.2: an explicit float KV dtype that differs from the model dtype.

Plain data and small functions of a config (read through attributes, as the other knowledge
modules read it); the 0.34.0 loader and stages apply them.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

import attrs

from enginecfg.pipeline.errors import ConfigRejectedError, InvalidInputError
from enginecfg.pipeline.hf import HFConfigView, typed
from enginecfg.pipeline.models.architectures import GENERIC_ATTENTION
from enginecfg.pipeline.models.derive import gemma4_head_dims as _gemma4_dims
from enginecfg.pipeline.models.engine_defaults import attn_type as _attn_type_019
from enginecfg.pipeline.models.engine_defaults import chunked_prefill_supported
from enginecfg.pipeline.models.engine_defaults import (CHUNKED_LOCAL_ATTENTION_WARNING, HYBRID_MANAGER_NEEDED_ERROR,
                                                      HYBRID_MANAGER_NEEDED_ERROR_K10B)
from enginecfg.pipeline.models.v034 import vllm_registry_034
from enginecfg.pipeline.models.v034.backends import DEFAULT_BLOCK_SIZE, fa_supported
from enginecfg.pipeline.models.vllm_registry import REGISTRY as REGISTRY_019
from enginecfg.pipeline.models.vllm_registry import Fallback
from enginecfg.pipeline.releases import in_force

__all__ = ["RELEASE", "DEFAULT_BLOCK_SIZE", "REGISTRY", "registry_for", "REMOVED_ARCHITECTURES", "NEMOTRON_H_SSM_DTYPE", "transformers_backend",
           "is_hybrid", "is_mm_prefix_lm", "attn_type", "prefix_caching_supported", "chunked_prefill_supported",
           "batch_defaults", "chunked_prefill", "max_num_batched_tokens", "max_num_seqs", "async_scheduling",
           "gemma4_head_dims", "gemma4_rule", "float_kv_mismatch", "FP8_KV_MESSAGE", "MAMBA_ALL_DEPRECATED", "in_release_words", "REMOVED_ARGUMENTS", "BIDIRECTIONAL_NO_POOLING",
           "check_engine_args", "adapt", "ARGUMENT_CHOICES", "ARGUMENT_BOUNDS", "CONFIG_CLASS_CHECKED",
           "KIMI_LINEAR_DEFAULTS"]

#: the release whose generated tables these rules read (its model registry, its option table)
RELEASE = vllm_registry_034.VLLM_VERSION

#: vLLM 0.34.0's model registry (C1); its Transformers backend also runs a class whose module
#: uses the attention interface
#: C1: 0.34.0's own ``KimiLinearConfig`` (``vllm/transformers_utils/configs/kimi_linear.py``)
#: takes ``max_position_embeddings`` with a default of 4096, which 0.19.0's class did not have:
#: a Kimi-Linear config.json without it (and without ``model_max_length``) derives a
#: max_model_len of 4096 under 0.34.0 (0.19.0: none found, 2048 with a warning)
KIMI_LINEAR_DEFAULTS: Mapping[str, Any] = MappingProxyType({"max_position_embeddings": 4096})

REGISTRY = REGISTRY_019.changed(vllm_registry_034, attention_interface=True,
                    class_defaults={"kimi_linear": KIMI_LINEAR_DEFAULTS})
#: the same table before C14 (0.27.0), which brought the Kimi-Linear class default
_REGISTRY_BEFORE_C14 = attrs.evolve(REGISTRY, class_defaults={})


def registry_for(release: Any) -> Any:
    """The model registry *release* reads configs with (None: the latest): its architectures,
    and the config-class defaults it had (C14: Kimi-Linear's, from 0.27.0)."""
    return REGISTRY if in_force(release, "C14") else _REGISTRY_BEFORE_C14

#: architectures of the 0.19.0 table that left vLLM's registry, and the last release with them
REMOVED_ARCHITECTURES: Mapping[str, str] = MappingProxyType({
    name: last for name, last in REGISTRY.previously.items()
    if name in ("BambaForCausalLM", "MiniMaxForCausalLM", "MiniMaxText01ForCausalLM", "MiniMaxM1ForCausalLM",
                "Plamo2ForCausalLM")})

#: the dated rule that removed each architecture (C1b: Bamba and MiniMax; C1c: Plamo2)
_LEFT_BY = {"Plamo2ForCausalLM": "C1c"}
#: removed architectures whose Transformers class the backend does not take before C1g
_NOT_BACKEND_COMPATIBLE = ("BambaForCausalLM", "Plamo2ForCausalLM")

#: NemotronH's SSM-state dtype when the checkpoint names none (0.19.0: float16)
NEMOTRON_H_SSM_DTYPE = "float32"

#: what 0.34.0's cache config logs for a quantized KV cache (``%s``: the cache dtype)
#: C7d: CacheConfig's warning while it takes ``--mamba-cache-mode all`` (until C7e removes the mode)
MAMBA_ALL_DEPRECATED = ("Mamba cache mode 'all' is deprecated and will be removed in an upcoming release. If this "
                        "is a problem, please open an issue at https://github.com/vllm-project/vllm/issues.")
FP8_KV_MESSAGE = ("Using {} data type to store kv cache. It reduces the GPU memory footprint and boosts the "
                  "performance. Meanwhile, it may cause accuracy drop without a proper scaling factor")

#: C2: 0.34.0's refusal of a LlamaBidirectional checkpoint whose pooling name is absent or null
#: (0.19.0: ``pool_type None not supported``, or a crash reading the absent field)
BIDIRECTIONAL_NO_POOLING = (
    "This bidirectional model requires a 'pooling' field in its HF config (one of 'avg', 'cls', 'last'), but none "
    "was found. Unlike the VL variants, no default is assumed here because silently picking a pooling for an "
    "embedding model can produce wrong embeddings.")

_EXPERT_FIELDS = ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts")


def _num_experts(text: HFConfigView) -> int:
    for name in _EXPERT_FIELDS:
        if typed.has(text, name):
            value = typed.attr(text, name, typed.ANY)
            if isinstance(value, list):
                value = value[0] if value else 0
            if value:
                return value if isinstance(value, int) else 0
    return 0


def transformers_backend(hf: HFConfigView, text: HFConfigView) -> str:
    """The Transformers backend class a removed architecture resolves to (generative runner):
    ``Transformers`` + ``MultiModal`` for a nested config + ``MoE`` with experts + ``ForCausalLM``."""
    name = "Transformers"
    if text is not hf:
        name += "MultiModal"
    if _num_experts(text) > 0:
        name += "MoE"
    return name + "ForCausalLM"


def is_hybrid(info: Any, hf: HFConfigView) -> bool:
    """``ModelConfig.is_hybrid`` in 0.34.0: a hybrid class, unless every ``layer_types`` entry
    is ``attention`` or ``full_attention``."""
    if info is None or not info.is_hybrid_class:
        return False
    layer_types = typed.attr(hf, "layer_types", typed.LIST, typed.STR, typed.OBJECT)
    if layer_types is None:
        return True
    return not all(lt in ("attention", "full_attention") for lt in layer_types)


def is_mm_prefix_lm(cfg: Any) -> bool:
    """Gemma 4's multimodal class with bidirectional attention over images."""
    mc = cfg.model_config
    info = mc.arch_info
    if info is None or info.config_hook != "gemma4" or mc.hf_text_config is mc.hf_config:
        return False
    return typed.attr(mc.hf_text_config, "use_bidirectional_attention", typed.ANY) == "vision"


def attn_type(cfg: Any) -> str:
    return _attn_type_019(cfg)


def prefix_caching_supported(cfg: Any) -> bool:
    """C3.2: prefix caching's default; generative hybrids now default to on."""
    kind = attn_type(cfg)
    pc = cfg.pooler_config
    if pc is None:
        return kind in ("decoder", "hybrid")
    if kind != "decoder":
        return False
    return not (pc.seq_pooling_type in ("MEAN", "CLS") or pc.tok_pooling_type == "STEP")


def batch_defaults(gpu: Any, release: Any = None) -> tuple[int, int]:
    """C3.5: ``vllm serve``'s default (max_num_batched_tokens, max_num_seqs) on *gpu* in
    *release* (None: the latest): the tier of 160 GiB and more since C3.5b, GB10 kept on the
    small tier since C3.5c."""
    if gpu.memory_bytes >= 160 * 2**30 and in_force(release, "C3.5b"):
        return 16384, 1024
    gb10_small = gpu.capability == (12, 1) and in_force(release, "C3.5c")
    if gpu.memory_bytes >= 70 * 2**30 and "a100" not in gpu.device_name.lower() and not gb10_small:
        return 8192, 1024
    return 2048, 256


def chunked_prefill(cfg: Any) -> bool:
    """Whether chunked prefill is on: the caller's choice, else whether the model supports it."""
    on = cfg.scheduler_config.enable_chunked_prefill
    return chunked_prefill_supported(cfg) if on is None else bool(on)




def _mm_floor(cfg: Any) -> tuple[int, str] | None:
    """The most tokens one multimodal item of a Gemma 4 prefix-LM model takes: an image
    (``vision_config.default_output_length``) or a video of 32 frames of 70 + 8 tokens."""
    if not is_mm_prefix_lm(cfg):
        return None
    tokens: dict[str, int] = {}
    vision = typed.attr(cfg.model_config.hf_config, "vision_config", typed.ANY)
    if isinstance(vision, HFConfigView):
        image = typed.attr(vision, "default_output_length", typed.INT)
        if image is not None:
            tokens["image"] = image
    tokens["video"] = 32 * (70 + 2 + 6)
    modality = max(tokens, key=tokens.__getitem__)
    return tokens[modality], modality


def max_num_batched_tokens(cfg: Any, gpu: Any, release: Any = None) -> int:
    """C3.5: the scheduler's token budget per step (the caller's, else the GPU's default,
    at least max_model_len without chunked prefill, at least one multimodal item for a
    prefix-LM model from C3.5a, at most max_num_seqs x max_model_len)."""
    given = cfg.scheduler_config.max_num_batched_tokens
    if given is not None:
        return given
    value, seqs = batch_defaults(gpu, release)
    mml = cfg.model_config.max_model_len
    if not chunked_prefill(cfg):
        value = max(mml, value)
    floor = _mm_floor(cfg) if in_force(release, "C3.5a") else None  # the floor came with C3.5a
    if floor is not None and floor[0] > value:
        value = floor[0]
    return min(seqs * mml, value)


def max_num_seqs(cfg: Any, gpu: Any, release: Any = None) -> int:
    """C3.5: the caller's ``max_num_seqs``, else the default, at most the token budget."""
    given = cfg.scheduler_config.max_num_seqs
    if given is not None:
        return given
    return min(batch_defaults(gpu, release)[1], max_num_batched_tokens(cfg, gpu, release))


def async_scheduling(cfg: Any) -> bool:
    """C3.5: asynchronous scheduling is on, but for pooling models."""
    return cfg.model_config.runner_type != "pooling"


def gemma4_head_dims(cfg: Any) -> dict[str, int]:
    """``{layer type: head size}`` over ``layer_types`` (the last layer of each type wins)."""
    text = cfg.model_config.hf_text_config
    layer_types = typed.attr(text, "layer_types", typed.LIST) or []
    n = typed.attr(text, "num_hidden_layers", typed.INT) or 0
    head, global_head = _gemma4_dims(text, absent=None)
    global_head = global_head or head
    out: dict[str, int] = {}
    for kind in layer_types[:min(n, len(layer_types))]:
        out[kind] = global_head if kind == "full_attention" else head
    return out


def gemma4_rule(cfg: Any, gpu: Any, release: Any = None,
                dims: dict[str, int] | None = None) -> tuple[str, str | None, int | None] | None:
    """C4: ``(message, backend to force, FlashAttention version to force)`` for a Gemma 4 model
    with heterogeneous head sizes on *gpu* (None: nothing to do); the per-layer FA3/FA4 choice
    for an FP8 KV cache on SM90 since C4c (*release*: None for the latest).  *dims*:
    :func:`gemma4_head_dims` of *cfg*, where the caller took it already."""
    if in_force(release, "C4b"):
        dims = gemma4_head_dims(cfg) if dims is None else dims
        if len(set(dims.values())) <= 1:
            return None
        shown = "{" + ", ".join(f"{k!r}: {v}" for k, v in dims.items()) + "}"
    else:  # before C4b: the text config's two head sizes, both needed, printed as %d
        head, global_head = _gemma4_dims(cfg.model_config.hf_text_config, absent=None)
        if head is None or global_head is None or head == global_head:
            return None
        dims = {"head_dim": head, "global_head_dim": global_head}
        shown = f"(head_dim={int(head)}, global_head_dim={int(global_head)})"
    ac, cc = cfg.attention_config, cfg.cache_config
    fa_version = ac.flash_attn_version
    if fa_supported(4, gpu.capability) and max(dims.values()) <= 512:
        if fa_version is None and ac.backend in (None, "FLASH_ATTN"):
            if gpu.capability[0] == 9 and cc.cache_dtype.startswith("fp8") and in_force(release, "C4c"):
                return (f"Gemma4 model has heterogeneous head dimensions {shown}. Using per-layer FA3/FA4 "
                        f"selection for FP8 KV cache on SM90.", None, None)
            return (f"Gemma4 model has heterogeneous head dimensions {shown}. Using FA4 for all layers to "
                    f"avoid mixed FA3/FA4 penalty.", None, 4)
        return None
    if ac.backend is None:
        return (f"Gemma4 model has heterogeneous head dimensions {shown}. FA4 not available, forcing "
                f"TRITON_ATTN backend.", "TRITON_ATTN", None)
    return None


def float_kv_mismatch(cfg: Any) -> str | None:
    """C9.2: an explicit float16/bfloat16 KV cache that differs from the model dtype."""
    cache, model = cfg.cache_config.cache_dtype, cfg.model_config.dtype
    if cache not in ("float16", "bfloat16") or cache == model:
        return None
    allowed = f"`auto` or `{model}`" if model in ("float16", "bfloat16") else "`auto`"
    return (f'kv_cache_dtype="{cache}" is incompatible with dtype="{model}". Please set `--kv-cache-dtype` '
            f"to {allowed}.")


#: engine arguments 0.34.0 no longer has (C6)
REMOVED_ARGUMENTS: Mapping[str, str] = MappingProxyType({
    "calculate_kv_scales": "removed since {since}: KV-cache scales come from the checkpoint or default to 1.0",
})


#: the choices of ``vllm serve`` 0.34.0's parser where they differ from 0.19.0's (its flag
#: table, ``pipeline/releases/options/``, holds the same; a test compares them), in
#: the order of its config class's Literal (``MambaDType``), whose words refuse another value
ARGUMENT_CHOICES: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "mamba_cache_dtype": ("auto", "float32", "float16", "bfloat16"),
    "mamba_ssm_cache_dtype": ("auto", "float32", "float16", "bfloat16"),
})

#: the bounds 0.34.0's config classes check while they are built (pydantic ``Field(gt=...)``,
#: ``ge=``), in pydantic's words; 0.19.0 accepted a nonpositive block size there
ARGUMENT_BOUNDS: Mapping[str, tuple[str, int]] = MappingProxyType({
    "block_size": ("greater than", 0), "mamba_block_size": ("greater than", 0),
    "tensor_parallel_size": ("greater than or equal to", 1),
    "pipeline_parallel_size": ("greater than or equal to", 1),
})

#: the bounds C13 (0.23.0) brought: before it ``block_size`` is a ``SkipValidation`` field and the
#: parallel sizes plain ones, as in 0.19.0
BOUNDED_BY_C13: tuple[str, ...] = ("block_size", "tensor_parallel_size", "pipeline_parallel_size")

#: the arguments 0.34.0 refuses while it builds its cache and parallel configs where 0.19.0
#: refused them later: the block size (enginecfg's own refusal after vLLM's steps), the
#: parallel sizes (after the vllm-level hooks)
CONFIG_CLASS_CHECKED: tuple[str, ...] = ("block_size", "pipeline_parallel_size", "tensor_parallel_size")


#: the dated rule that removed each argument of :data:`REMOVED_ARGUMENTS`
_REMOVED_BY = {"calculate_kv_scales": "C6"}


def check_engine_args(engine_args: dict[str, Any], release: Any) -> None:
    """C6: an engine argument *release* does not have is refused, as ``EngineArgs`` refuses it."""
    for name in engine_args:
        if name in REMOVED_ARGUMENTS and release.has(_REMOVED_BY[name]):
            since = next(r for r in release.chain if any(d.id == _REMOVED_BY[name] for d in r.adds))
            raise InvalidInputError(f"unknown engine argument {name!r} for vLLM {release} "
                                    f"({REMOVED_ARGUMENTS[name].format(since=f'vLLM {since}')})", field=name)


def adapt(cfg: Any, release: Any) -> Any:
    """What vLLM 0.34.0 resolves differently while it builds the model and cache configs,
    applied to a config loaded with 0.19.0's rules: a removed architecture runs on the
    Transformers backend (not hybrid); ``is_hybrid`` counts ``full_attention`` layers as
    attention; the block size defaults to 64; the Mamba cache mode is never taken from the
    engine arguments (with vLLM's deprecation warning); the quantized-KV line names the dtype."""
    mc, cc = cfg.model_config, cfg.cache_config
    info = mc.arch_info
    removed = info is not None and info.name in REMOVED_ARCHITECTURES and release.has(_LEFT_BY.get(info.name, "C1b"))
    if removed and info.name in _NOT_BACKEND_COMPATIBLE and not release.has("C1g"):
        # C1b/C1c until C1g: the Transformers backend does not take the class, config time stops
        raise ConfigRejectedError(f"Model architecture {info.name} was supported in vLLM until "
                                  f"v{REMOVED_ARCHITECTURES[info.name]}, and is not supported anymore. Please use "
                                  f"an older version of vLLM if you want to use this model architecture.",
                                  field="model_config.architecture", vllm_type="ValueError")
    if removed:
        mc.architecture = transformers_backend(mc.hf_config, mc.hf_text_config)
        mc.arch_fallback = Fallback(info.name, mc.architecture, "transformers", str(release))
        mc.arch_info = GENERIC_ATTENTION
        mc.is_attention_free = False
        mc.supports_mamba_prefix_caching = False
        info = GENERIC_ATTENTION
    if removed or release.has("C1e"):  # C1e: all-attention layer_types are not hybrid
        mc.is_hybrid = is_hybrid(info, mc.hf_config)
    if not cc.user_specified_block_size:
        cc.block_size = release.default_block_size
    messages = list(cfg.load_messages)
    if release.has("C7f"):  # the flag is taken, warned about and ignored; the text names C7f's or C7g's release
        if cfg.engine_args.get("mamba_cache_mode") is not None:
            named = next(r for r in reversed(release.chain) if any(d.id in ("C7f", "C7g") for d in r.adds))
            messages.append(("WARNING", f"--mamba-cache-mode is deprecated and will be removed in v{named}. It "
                                        f"has no effect: Mamba prefix caching follows --enable-prefix-caching."))
        cc.mamba_cache_mode = "none"
    if release.has("C7d") and not release.has("C7e") and cfg.engine_args.get("mamba_cache_mode") == "all":
        # C7d: CacheConfig warns while it takes 'all' (after the KV dtype's line, before VllmConfig's)
        at = next((i for i, m in enumerate(messages) if m == ("WARNING", CHUNKED_LOCAL_ATTENTION_WARNING)),
                  len(messages))
        messages.insert(at, ("WARNING", MAMBA_ALL_DEPRECATED))
    old = ("INFO", "Using fp8 data type to store kv cache. It reduces the GPU memory footprint and boosts the "
                   "performance. Meanwhile, it may cause accuracy drop without a proper scaling factor.")
    messages = [("INFO", FP8_KV_MESSAGE.format(cc.cache_dtype)) if m == old else m for m in messages]
    cfg.load_messages = messages
    if cfg.pending_errors:
        cfg.pending_errors = [(phase, in_release_words(err, release)) for phase, err in cfg.pending_errors]
    return cfg


def in_release_words(err: Any, release: Any) -> Any:
    """*err*, a refusal of the shared loader, in *release*'s words: the explicit-hybrid-manager
    refusal names ``--enable-hybrid-kv-cache-manager`` under rule K10b; any other as it is."""
    if not (isinstance(err, ConfigRejectedError) and err.message == HYBRID_MANAGER_NEEDED_ERROR
            and release.has("K10b")):
        return err
    return ConfigRejectedError(HYBRID_MANAGER_NEEDED_ERROR_K10B, field=err.field, stage=err.stage,
                               vllm_type=err.vllm_type)
