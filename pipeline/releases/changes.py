"""What moving between two releases changes, decision by decision, as data: the situations
``upgrade`` recognises in a difference (``block_size.default``, ``enable_prefix_caching.hybrid``,
...), each with the dated rules that bring it, oldest first, the name the release notes give it
(``tests/data/vllm-0.34.0/RULES.md``'s ids) and the change in words.

A situation is explained by a move between two releases when one of its dated rules is in
force in exactly one of them (:func:`explain`): when its first rule is, by its notes' name, the
releases of the rules that moved (``0.20-0.34``) and its words; else (a later step only) by the later steps' ids, their
releases and their own words from the timeline.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

import attrs

__all__ = ["Situation", "SITUATIONS", "Explained", "explain"]


@attrs.frozen
class Situation:
    """A recognised difference: the dated rules that bring it (the first brings the change
    itself, later ones change it again), its name in the release notes, and its words."""

    rules: tuple[str, ...] = attrs.field(converter=tuple)
    name: str
    words: str


@attrs.frozen
class Explained:
    """Why a situation differs between two releases: the releases that brought the rules (as
    release notes write them: ``0.20``, ``0.20.1``, ``0.28-0.32``), the rules' names, the words."""

    release: str | None
    rule: str
    words: str


_S = Situation

#: situation -> the rules behind it (ids of the dated timeline)
SITUATIONS: Mapping[str, Situation] = MappingProxyType({
    "block_size.default": _S(("C3.3",), "C3.3",
                             "the default block size is 64 tokens (CacheConfig.DEFAULT_BLOCK_SIZE; was 16)"),
    "block_size.no_config_alignment": _S(
        ("C8",), "C8", "the hybrid alignment left config time: the config keeps the default block size and the "
                       "engine start aligns it after the weights load"),
    "block_size.start_alignment": _S(
        ("S2a", "S3a", "S4", "S2b", "S3b", "S2c", "S2d", "S3c", "S3d", "S3e", "S2e", "C3.3"), "S2-S4",
        "the hybrid alignment moved to the engine start (after load_model) and aligns to the attention backend's "
        "kernel block, at least the block size (64); since 0.32 the lcm of every backend's kernel block"),
    "block_size.not_built": _S(("C8", "C1b", "C1g"), "C8, F",
                               "the model class does not build under this release, so no engine start aligns the "
                               "block size"),
    "block_size.all_mode": _S(("S3d",), "S3",
                              "the 'all' Mamba cache mode sized the hybrid's block in multiples of the Mamba chunk "
                              "(its mamba_chunk_size, 2048 by default) and a Mamba block spanned it; with 'all' "
                              "gone (0.32) the block is the smallest aligned one that holds a Mamba page"),
    "start.all_mode": _S(("K4e",), "K4",
                         "in the 'all' Mamba cache mode every Mamba layer keeps a block per block of a request's "
                         "tokens, so a long request needs far more KV cache; with 'all' gone (0.32) a Mamba layer "
                         "keeps a fixed few blocks per request"),
    "enable_prefix_caching.hybrid": _S(("C3.2b",), "C3.2",
                                       "prefix caching is on by default for generative hybrid models (was off)"),
    "mamba_cache_mode.prefix_default": _S(("C3.2b", "C7c"), "C3.2 + C7",
                                          "with prefix caching on by default, a hybrid's Mamba cache mode defaults "
                                          "to 'align'"),
    "mamba_cache_mode.all_gone": _S(("C7e",), "C7",
                                    "the 'all' mode is gone: the mode is 'align' exactly when prefix caching is on"),
    "mamba_cache_mode.ignored": _S(("C7f",), "C7",
                                   "--mamba-cache-mode no longer sets the mode (deprecated, no effect): a model "
                                   "without Mamba layers keeps 'none'"),
    "mamba_block_size.align": _S(("C7c", "C7e"), "C7, S5",
                                 "in 'align' mode (the default with prefix caching) a Mamba block is one attention "
                                 "block"),
    "mamba_page_size_padded.start_alignment": _S(("S6", "S2c", "S2e", "C3.3"), "S6",
                                                 "the Mamba page is padded to the attention page of the block size "
                                                 "the engine start chose"),
    "mamba_ssm_cache_dtype.nemotron_h": _S(("C5a",), "C5",
                                           "NemotronH's SSM-state dtype when the checkpoint names none is float32 "
                                           "(was float16)"),
    "backend.gemma4": _S(("C4a", "C4b", "C4c", "C4d"), "C4",
                         "Gemma 4 with heterogeneous head sizes runs FlashAttention 4 where the GPU has it (per layer "
                         "FA3/FA4 on Hopper with an FP8 KV cache); TRITON_ATTN only without FA4"),
    "gpu_memory_utilization.default": _S(("C3.4a", "C3.4b"), "C3.4",
                                         "gpu_memory_utilization defaults to None: 1.0 with the extensible KV cache "
                                         "(on by default on CUDA), else 0.92 (was 0.9)"),
    "kv_tokens.meaning": _S(("K6a", "K6b", "K6c"), "K6",
                            "the logged 'GPU KV cache size' is floor(concurrency x max_model_len) (was blocks over "
                            "groups x the smallest block)"),
    "concurrency.groups": _S(("K6b", "G5a", "K4b", "K4c", "K4d", "K4e"), "K2, K4-K6",
                             "concurrency counts every group's blocks per request, and layers of one type share a "
                             "group"),
    "architecture.transformers_backend": _S(("C1b", "C1c", "C1g"), "C1",
                                            "the architecture left vLLM's registry (Bamba and MiniMax in 0.24, Plamo2 "
                                            "in 0.27): the Transformers backend runs it, as a plain decoder, not as a "
                                            "hybrid"),
    "error.calculate_kv_scales": _S(("C6",), "C6", "calculate_kv_scales was removed: the engine arguments refuse it"),
    "error.mamba_block_size": _S(("C3.2b",), "C9.5",
                                 "prefix caching is on by default for hybrids, so --mamba-block-size is no longer "
                                 "refused"),
    "error.chunked_prefill": _S(("C3.2b", "C7e"), "C3.2, C9.1",
                                "prefix caching (on by default for hybrids) needs chunked prefill"),
    "start.not_built": _S(("F1a", "F1b", "F7"), "F1-F7",
                          "the model class fails to build under this release (see the start failure)"),
})


def _when(names: list[str]) -> str:
    ordered = sorted(dict.fromkeys(names), key=lambda n: tuple(int(p) for p in n.split(".")))
    short = [".".join(n.split(".")[:2]) if n.endswith(".0") else n for n in ordered]
    return short[0] if len(short) == 1 else f"{short[0]}-{short[-1]}"


def explain(situation: str, old, new) -> Explained | None:
    """Why *situation* differs between releases *old* and *new* (either order); None when the
    situation is not known, or none of its rules is in force in exactly one of them."""
    from enginecfg.pipeline import releases

    s = SITUATIONS.get(situation)
    if s is None:
        return None
    # a rule that changes nothing enginecfg computes explains no difference it finds
    moved = [r for r in s.rules if old.has(r) != new.has(r) and r not in releases.NOTHING_TO_SWITCH]
    if not moved:
        return None
    dated = [releases.rule(r) for r in moved]
    if moved[0] == s.rules[0]:
        return Explained(_when([d.release for d in dated if d is not None]), s.name, s.words)
    words = "; ".join(f"{d.id} ({_when([d.release])}): {d.what}" for d in dated if d is not None)
    return Explained(_when([d.release for d in dated if d is not None]), ", ".join(moved), words)
