"""The vLLM releases enginecfg speaks for, in one room.

A :class:`Release` is a value: its name, the release before it and the dated rules it adds on
top of that one (``rules.json``, written by ``tools/make_release_rules.py`` from the dated
timeline, ``TIMELINE.md`` in this room).  Everything a command used to work out by
comparing release names is a question to it:

- :attr:`Release.decides_at_engine_start`: whether the hybrid block alignment (and with it the
  block size the engine runs with) is decided after the weights load, at engine start (rule
  C8), rather than at config time;
- :meth:`Release.flag_table`: its ``vllm serve`` option table (:mod:`.options`: each held table
  is what that release's parser changed on the one before; a release without one of its own
  reads with the nearest earlier table, and says so:
  :attr:`Release.table_note`), and :attr:`Release.sets_aside`, the options of the first
  release's table its parser no longer takes (the difference of the two tables);
- :attr:`Release.default_block_size`, :attr:`Release.ignored_arguments`, :meth:`Release.has`
  (whether a dated rule is in force), :attr:`Release.before`, :attr:`Release.adds`.

Releases are composed in order: each is the release before it plus its dated rules
(:func:`compose`).  The names are data: no other room spells one.  The one place that reads
which release a run speaks for when none is given is :func:`requested` (the argument, else
``$ENGINECFG_VLLM_VERSION``, else the first release).

This room imports nothing of ours but the shared errors: the knowledge modules, the engine,
the commands and the command line all read it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping

import attrs

from enginecfg.pipeline.errors import InvalidInputError
from enginecfg.pipeline.releases import options
from enginecfg.pipeline.releases.options import OptionTable

__all__ = ["in_force", "DatedRule", "Release", "RELEASE_ENV", "compose", "add", "get", "known", "names", "all_releases",
           "first", "last", "requested", "from_env", "env_value", "nearest", "version_key", "brought_by", "rule",
           "rules_between", "ENGINE_START_RULE", "WIRED", "NOTHING_TO_SWITCH"]

#: the environment variable naming the vLLM release a run speaks for when none is given
RELEASE_ENV = "ENGINECFG_VLLM_VERSION"

#: the dated rule that moves the hybrid block alignment from config time to the engine start
ENGINE_START_RULE = "C8"
#: the dated rule that raises the default block size (CacheConfig.DEFAULT_BLOCK_SIZE) to 64
_BLOCK_64_RULE = "C3.3"
#: the dated rule after which ``--mamba-cache-mode`` is taken but has no effect
_MODE_IGNORED_RULE = "C7f"

#: the dated rules the shared machinery switches on a release's rules (a hook or a datum each):
#: C8 picks the start-up machinery (the block size decided at engine start), C3.3 the default
#: block size, C6 the removed ``calculate_kv_scales``, C3.2b prefix caching as the hybrids'
#: default, C3.4a/C3.4b the memory utilization's default, C7f/C7g the ignored (and warned
#: about) ``--mamba-cache-mode``, C1b/C1c/C1g the architectures that left the registry, C1e ``is_hybrid``, C7c the
#: Mamba cache mode's default, K7a/K7b the not-enough-memory text, B6b/S3e/K4d the Mamba
#: prefill checkpoints (alignment unit, blocks per request), C9.2 the float KV check, C3.5b/C3.5c
#: the batch tiers, B1f/B1g the priority lists, C4c Gemma 4's FP8 choice on SM90, K11 the null
#: block the capacity check holds back; the ``vllm serve`` flag rules
#: (C12a-C12n) are the option tables, each release reading with its own or the nearest earlier one
#: B2f FLASH_ATTN taking an FP8 cache with the head-512 FA4 kernel on Hopper (and its kernel block
#: of 64), K10b the explicit-hybrid-manager refusal's wording, C7d the warning about 'all', C7e 'all'
#: gone (0.32.0's parser refuses it; before it W2's fallback and the assertion for 'align' only;
#: the chunked-prefill assertion's words are C7f's), C2 LlamaNemotronVL's missing pooling, C4b Gemma 4's
#: head sizes per layer type (before it the text config's head_dim/global_head_dim and their words),
#: K4b the tokens a sliding window holds in flight, F8a/F8b 0.24.0's tied lm_head under ModelOpt,
#: K6a the logged "GPU KV cache size", B6a the gated delta nets' class names (its per-GPU prefill backend
#: reaches no decision before B6b), C4a Gemma 4's FA4 (before it 0.19.0's TRITON_ATTN),
#: F9 the grouped-top-k refusal's type (``config_time.in_release_words``), K9b the memory the
#: profiling keeps besides the weights (``v034.memory.parts``), K1a-K1c the sliding-window layer's block,
#: K5a what the start-up check plans against under --num-gpu-blocks-override, G4a the padding of an
#: attention page that does not divide the largest (before it refused), B1b/B1c/B1d the MLA priority
#: lists (TokenSpeed MLA, 12.x's own list, FlashAttention's sparse MLA on Hopper), B2b/B2d the KV dtypes
#: FLASH_ATTN takes, B2c its kernel blocks for a float32-state hybrid, B2g its SM90 head-512 block check and
#: the words of its FP8 refusal, B2h its multimodal prefix-LM layers, B3b/B3e/B3c FlashAttention's version
#: (FA4 for heads over 256 on Hopper; head 256 on Blackwell's FA4 in 0.27.0 but for sliding windows),
#: F7a/F7b the Triton attention and Triton MLA backends' FP8 refusal below capability 8.9; and the
#: rules of :data:`NOTHING_TO_SWITCH`
WIRED: frozenset[str] = frozenset({"C8", "C3.3", "C6", "C3.2b", "C3.4a", "C3.4b", "C7f", "C7g", "C1b", "C1c", "C1g", "C1e", "C7c",
                                "K7a", "K7b", "B6b", "S3e", "K4d", "C9.2", "C3.5b", "C3.5c", "B1f", "B1g",
                                "C4c", "K11", "K10b", "B2f", "C7d", "C7e", "C2", "C4b", "K4b", "F8a", "F8b", "K6a", "B6a", "C4a", "F9", "C5b",
                                "S3d", "K4e", "C9.6", "S8", "S0b", "S1b", "S3b", "B2e", "B3d", "K6c", "C14", "C13", "F1b",
                                "K9b", "K1a", "K1b", "K1c", "K5a", "G4a",
                                "B1b", "B1c", "B1d", "B2b", "B2c", "B2d", "B3b", "B3c", "B3e", "F7a", "F7b", "B2g", "B2h",
                                # C5d: the text-only Qwen3.5 classes reach the Qwen3.5 hook through the
                                # normalised architecture; C3.5a: the multimodal prefix-LM floor of the
                                # token budget; F1a: the Transformers-backend build of a removed architecture
                                "C5d", "C3.5a", "F1a"})

#: dated rules that change nothing enginecfg computes, each with the reason: they count as wired
#: (there is no switch to add), and ``tests/test_release_wiring.py`` holds each reason true
NOTHING_TO_SWITCH: Mapping[str, str] = MappingProxyType({
    "C1f": "vLLM 0.33.0 drops ModelConfig.supports_mamba_prefix_caching; the decisions that read it (the "
           "'all' Mamba cache mode default and the W2 fallback of MambaModelConfig.verify_and_update_config) "
           "left with C7e in 0.32.0, so no decision of a release around it reads it; the run document reports "
           "the architecture's own interface flag for every release alike",
    "C4d": "the XPU branch of Gemma4Config.verify_and_update_config: enginecfg's GPUs are CUDA devices only "
           "(each a compute capability), so no run reaches it",
    "K4a": "the speculative blocks a Mamba layer keeps in 'all' mode: enginecfg plans no speculative decoding "
           "in any release (no release's engine arguments in enginecfg take speculative_config, refused as "
           "unknown), so every Mamba layer has 0 speculative blocks, before the rule as after it",
    "K4c": "the tokens a sliding window keeps for speculative decoding: enginecfg plans no speculative decoding "
           "in any release (speculative_config is refused as unknown), so a window keeps no extra tokens, before "
           "the rule as after it",
    "S2c": "the first backend reshaping the attention spec before the alignment sizes a token: on the path it "
           "applies to (no MLA, no TurboQuant KV dtype, which S2b's branch takes) every backend enginecfg selects "
           "returns the spec unchanged; the one that does not (the ultraquant KV dtype's) is refused by every "
           "release's engine arguments in enginecfg",
    "S2d": "the largest of several Mamba state layouts, which only Qwen4Exp's class declares "
           "(get_mamba_specs_from_config); enginecfg has no Mamba-state entry for Qwen4Exp and resolves it on "
           "the Transformers backend as a plain attention model in every release, so no hybrid alignment "
           "reads its layouts",
    "S3c": "the sparse-indexer alignment of 0.30.0-0.31.0 reads index_kpool, which only Glm5Next's config carries; "
           "enginecfg has no Mamba-state entry for Glm5Next and resolves it on the Transformers backend as a "
           "plain attention model in every release, so no hybrid alignment runs for it (an alignment enginecfg "
           "would need first, in every release alike)",
    "S3f": "the removal of S3c (0.32.0): as S3c, it would act only on Glm5Next, which no hybrid alignment of "
           "enginecfg reaches",
    "G5a": "buckets of full-attention specs that differ only in their sliding window or chunk size merged into "
           "one: a full-attention spec of enginecfg never carries either (its layers declare none, and the "
           "sliding-window layers that --disable-hybrid-kv-cache-manager turns into full attention keep none), "
           "so the specs that would merge are already equal and share a bucket before the rule as after it",
    "G3a": "packed KV cache configs where every group is of mixed layer shapes (DeepSeek V4's layout) or a KV "
           "connector asks for cross-layer blocks: enginecfg takes no kv_transfer_config (refused as unknown), and "
           "its only group of mixed shapes is a sole group (G2), whose packed block holds each layer's page once, "
           "the bytes and the block count of the unpacked group",
    "G3b": "packed groups for a block-outermost KV cache layout: vLLM resolves one only under VLLM_KV_CACHE_LAYOUT, a "
           "KV connector's preference or the sparse-MLA indexer's layers, none of which enginecfg models in any "
           "release (0.34.0 included: every plan is layer-outer), so no release's plan reaches the packed groups",
    "G4b": "a Mamba page smaller than the largest one padded to it at grouping: in enginecfg the start-up "
           "alignment pads every Mamba page to the attention page at the start-up block, and no attention layer of "
           "a hybrid has a larger page (each takes the start-up block, or a smaller kernel block from K1a), so the "
           "Mamba page is always the largest and never reaches the padding, before the rule as after it",
    "G4c": "which attention pages may be padded at grouping: before it vLLM padded only pages read through the block "
           "stride, which every backend enginecfg selects for a non-MLA layer in 0.24.0-0.28.0 does (FLASH_ATTN, "
           "FLASHINFER, TRITON_ATTN, FLEX_ATTENTION; the TurboQuant KV dtypes are refused), and an MLA page is "
           "never smaller than the largest in enginecfg's plans (MLA models are MLA throughout; a hybrid's Mamba "
           "page is padded to the attention page), so the refusal and the full-allocation fallback are never reached",
    "K10a": "the hybrid KV cache manager kept on with a KV connector that supports it (0.19.0 turned it off for "
            "any connector): no release's engine arguments in enginecfg take kv_transfer_config (refused as "
            "unknown), so no run has a connector, before the rule as after it",
    "K6b": "the concurrency summed group by group: before it vLLM divided the summed per-request bytes of every "
           "group by the first group's page, which gives the same number whenever the groups share one page; "
           "every plan enginecfg makes has one page for all its groups (a G2 group of mixed shapes is the only "
           "group; otherwise the pages are unified before the layers are grouped), since the groups whose pages "
           "differ are the packed ones of a block-outermost KV cache layout, which no run of enginecfg selects",
    "S2e": "the Mamba state alignment is 16 only with --use-replayssm on FlashInfer's Mamba backend; no release's "
           "engine arguments in enginecfg take use_replayssm (refused as unknown), so the alignment is 1 and the "
           "Mamba page is the plain sum of its states, as before the rule",
    "C3.2a": "ModelConfig.is_prefix_caching_supported turns True for generative hybrids in 0.26.0, but its one "
             "reader, the prefix-caching default, adds 'and not is_hybrid' in the same release, so a generative "
             "hybrid starts with prefix caching off before the rule as after it (until C3.2b); the pooling "
             "runner's warning never reaches the branch (a pooling hybrid is unsupported in both)",
    "C5c": "the text-only Qwen3.5 classes' own hook of 0.27.0 sets the SSM-state dtype as the Qwen3.5 hook they "
           "reach from 0.26.0 (C5d) already does, and besides only drops mrope_section and mrope_interleaved from "
           "the text config's rope_parameters, which nothing enginecfg derives (the context length, the layers, "
           "the KV and Mamba pages) reads",
    "C1d": "from 0.27.0 a Gemma 4 deployment with multimodal inputs disabled is no multimodal "
           "prefix-LM; vLLM disables them only through limit_mm_per_prompt (every modality 0) or "
           "language_model_only, which no release's engine arguments in enginecfg take (refused as "
           "unknown), so a multimodal Gemma 4 keeps its inputs, and is a prefix-LM, before the rule "
           "as after it",
    "C9.9a": "the 'align' mode assertion of 0.21.0-0.24.0 that Model Runner V2 is off reads only the "
             "environment variable VLLM_USE_V2_MODEL_RUNNER, unset by default (0.21.0: '0'; "
             "0.22.0-0.24.0: None), so it holds in the default environment enginecfg models; "
             "enginecfg reads no such variable (a run with it set resolves as one without), so an "
             "'align' run resolves alike before the rule and with it",
    "C9.9b": "the removal of C9.9a's assertion (Model Runner V2 supports 'align' mode): the assertion "
             "never fires in the default environment enginecfg models (see C9.9a), so removing it "
             "changes nothing enginecfg computes",
    "C7b": "the removal of C7a (prefix caching with speculative decoding picking 'align' rather than "
           "'all'): both rules act only with speculative decoding, which enginecfg plans in no "
           "release (speculative_config is refused as unknown), so the Mamba cache mode is decided as "
           "without speculative decoding, before the rule as after it",
    "S2b": "the TurboQuant page of the hybrid alignment (0.21.0) is taken only for a turboquant_* KV "
           "cache dtype, which no release's engine arguments in enginecfg take (refused as not "
           "allowed), so the attention page of one token is the plain one, before the rule as after "
           "it",
    "S7": "the heterogeneous-KV block alignment of 0.25.0 runs only with "
          "--kv-cache-dtype-skip-layers, which no release's engine arguments in enginecfg take "
          "(kv_cache_dtype_skip_layers is refused as unknown), so every layer keeps one KV dtype and "
          "the block size is the hybrid alignment's, before the rule as after it",
    "B1e": "Blackwell's list for non-causal attention (FLASH_ATTN first): a layer is non-causal only with "
           "attention_config.use_non_causal, which DiffusionGemma's config hook or a DFlash/DSpark draft sets; "
           "enginecfg resolves DiffusionGemmaForBlockDiffusion on the Transformers backend with no config hook "
           "in every release and refuses speculative_config and attention_config as unknown engine arguments, "
           "so every layer it plans is causal, before the rule as after it",
    "B5a": "attention_config.backend_per_kind is given only through --attention-config, which no release's "
           "engine arguments in enginecfg take (attention_config refused as unknown), so every layer is "
           "selected with the one --attention-backend, before the rule as after it",
})
WIRED = WIRED | frozenset(NOTHING_TO_SWITCH)
_TABLE_RULE = "C12"

_HERE = Path(__file__).resolve().parent


def version_key(name: str) -> tuple[int, ...]:
    """``"0.20.1"`` -> ``(0, 20, 1)``; a name that is not dotted numbers is refused."""
    try:
        return tuple(int(p) for p in name.split("."))
    except (AttributeError, ValueError):
        raise InvalidInputError.for_value("vllm_version", name, "a vLLM version such as X.Y.Z") from None


@attrs.frozen
class DatedRule:
    """One difference in vLLM's decisions, dated to the first release whose code has it:
    its id (``C8``, ``K6a``), the release, what changes, the vLLM function and the upstream
    change (PR or release note; None where none was found)."""

    id: str
    release: str
    what: str
    where: str = ""
    pr: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "release": self.release, "what": self.what, "where": self.where, "pr": self.pr}


@attrs.frozen(eq=False)
class Release:
    """A vLLM release: the release before it and the dated rules it adds (see the module doc).
    Two releases are equal when their names are."""

    name: str
    before: Release | None = attrs.field(default=None, repr=lambda r: r.name if r is not None else "None")
    adds: tuple[DatedRule, ...] = attrs.field(default=(), converter=tuple, repr=False)
    #: every dated rule id in force (its own and those of every release before it)
    rules: frozenset[str] = attrs.field(init=False, repr=False)
    #: the release whose ``vllm serve`` option table this one reads with (itself, or the nearest
    #: earlier one with a table); a table of its own may be handed over (a scratch release)
    table: OptionTable | None = attrs.field(default=None, repr=False, kw_only=True)

    def __attrs_post_init__(self) -> None:
        inherited = self.before.rules if self.before is not None else frozenset()
        object.__setattr__(self, "rules", inherited | {r.id for r in self.adds})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Release) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __str__(self) -> str:
        return self.name

    # -- where it stands ----------------------------------------------------------------------
    @property
    def key(self) -> tuple[int, ...]:
        return version_key(self.name)

    @property
    def short(self) -> str:
        """The name as release notes write it (``0.20`` for ``0.20.0``; a patch release whole)."""
        parts = self.name.split(".")
        return ".".join(parts[:2]) if parts[2:] == ["0"] else self.name

    @property
    def chain(self) -> tuple[Release, ...]:
        """This release and every one before it, oldest first."""
        out: list[Release] = []
        r: Release | None = self
        while r is not None:
            out.append(r)
            r = r.before
        return tuple(reversed(out))

    @property
    def first(self) -> Release:
        """The release every other is composed on."""
        return self.chain[0]

    def has(self, rule_id: str) -> bool:
        """Whether the dated rule *rule_id* is in force in this release."""
        return rule_id in self.rules

    # -- what the commands ask ---------------------------------------------------------------
    @property
    def decides_at_engine_start(self) -> bool:
        """Whether runs of this release decide the block size (the hybrid alignment, the
        backend's preference) at engine start, after the weights load (C8), not at config time."""
        return self.has(ENGINE_START_RULE)

    @property
    def reference(self) -> Release:
        """The release whose decisions the shared machinery this release runs reproduces whole:
        the first release for one that decides at config time, the latest for one that decides
        at engine start."""
        if not self.decides_at_engine_start:
            return self.first
        latest = _latest_at_engine_start()
        return self if latest is None else latest

    @property
    def unwired(self) -> tuple[str, ...]:
        """The dated rules in which this release differs from its :attr:`reference` that the
        machinery does not switch yet (empty: its answers are exactly its rules')."""
        ids = self.rules ^ self.reference.rules
        return tuple(sorted(i for i in ids if i not in WIRED and not i.startswith(_TABLE_RULE)))

    @property
    def exact(self) -> bool:
        """Whether every decision of this release follows its own dated rules (see :attr:`unwired`)."""
        return not self.unwired

    @property
    def default_block_size(self) -> int:
        """``CacheConfig.DEFAULT_BLOCK_SIZE`` (C3.3)."""
        return 64 if self.has(_BLOCK_64_RULE) else 16

    @property
    def ignored_arguments(self) -> tuple[str, ...]:
        """Engine arguments this release takes but which have no effect in it (never pinned)."""
        return ("mamba_cache_mode",) if self.has(_MODE_IGNORED_RULE) else ()

    @property
    def table_release(self) -> Release:
        """The release whose option table this one reads ``vllm serve`` lines with."""
        for r in reversed(self.chain):
            if r.table is not None or options.held(r.name):
                return r
        return self.first

    @property
    def table_note(self) -> str | None:
        """None where the release has its own option table; else the sentence saying whose it reads with."""
        other = self.table_release
        if other == self:
            return None
        return (f"vLLM {self.name}'s serve options are read with {other.name}'s option table, the nearest "
                f"earlier one enginecfg holds")

    def flag_table(self) -> OptionTable:
        """The ``vllm serve`` option table (``VLLM_SERVE_OPTIONS``, ``VLLM_SERVE_CHOICES``,
        ``VLLM_SERVE_SWITCHES``) this release's parser reads with."""
        source = self.table_release
        if source.table is not None:
            return source.table
        return options.table(source.name)

    @property
    def sets_aside(self) -> frozenset[str]:
        """The options of the first release's ``vllm serve`` this release's parser no longer
        takes (the serve command leaves them out)."""
        if self.table_release == self.first.table_release:
            return frozenset()
        return frozenset(self.first.flag_table().VLLM_SERVE_OPTIONS) - frozenset(self.flag_table().VLLM_SERVE_OPTIONS)

    def to_dict(self) -> dict[str, Any]:
        return {"release": self.name, "before": self.before.name if self.before is not None else None,
                "rules": [r.to_dict() for r in self.adds], "option_table": self.table_release.name,
                "decides_at_engine_start": self.decides_at_engine_start, "exact": self.exact,
                "reference": self.reference.name, "unwired": list(self.unwired)}


def compose(name: str, adds: Iterable[DatedRule | str] = (), before: Release | str | None = None, *,
            table: OptionTable | None = None) -> Release:
    """Release *name*: *before* (a release or its name; default the latest) plus the dated
    rules *adds* (:class:`DatedRule`, or bare ids dated to *name*)."""
    key = version_key(name)
    base = get(before) if isinstance(before, str) else (before if before is not None else last())
    if key <= version_key(base.name):
        raise InvalidInputError.for_value("vllm_version", name, f"a release after {base.name}, the release it is "
                                                                f"composed on")
    rules = tuple(r if isinstance(r, DatedRule) else DatedRule(str(r), name, "") for r in adds)
    return Release(name, base, rules, table=table)


# -- the releases there are -------------------------------------------------------------------------
def _load() -> dict[str, Release]:
    data = json.loads((_HERE / "rules.json").read_text(encoding="utf-8"))
    out: dict[str, Release] = {}
    before: Release | None = None
    for entry in data["releases"]:
        name = entry["release"]
        adds = tuple(DatedRule(r["id"], name, r["what"], r.get("where", ""), r.get("pr")) for r in entry["rules"])
        before = out[name] = Release(name, before, adds)
    return out


_KNOWN: dict[str, Release] = _load()


#: ``(the known releases, by identity, the latest of them that decides at engine start)``:
#: worked out again whenever the known releases are not the very same objects (one added,
#: replaced or removed)
_LATEST: list[tuple[tuple[int, ...], tuple[Release, ...], Release | None]] = [((), (), None)]


def _latest_at_engine_start() -> Release | None:
    """The latest known release that decides at engine start (None: none does); every
    failed or finished run's document names it, through :attr:`Release.reference`."""
    known_now = tuple(_KNOWN.values())
    ids = tuple(map(id, known_now))
    held_ids, _, latest = _LATEST[0]
    if ids == held_ids:
        return latest
    latest = max((r for r in known_now if r.decides_at_engine_start), key=lambda r: r.key, default=None)
    _LATEST[0] = (ids, known_now, latest)  # the releases held, so their ids stay theirs
    return latest


def add(release: Release) -> Release:
    """Make *release* one the commands accept (a release composed in-process; one of the same
    name is replaced)."""
    if not isinstance(release, Release):
        raise InvalidInputError.for_value("release", release, "a Release")
    _KNOWN[release.name] = release
    return release


def all_releases() -> tuple[Release, ...]:
    """Every release spoken for, oldest first."""
    return tuple(sorted(_KNOWN.values(), key=lambda r: r.key))


def names() -> tuple[str, ...]:
    return tuple(r.name for r in all_releases())


def first() -> Release:
    """The first release spoken for: the default, and the base every other is composed on."""
    return all_releases()[0]


def last() -> Release:
    return all_releases()[-1]


def known(name: Any) -> bool:
    return isinstance(name, str) and name in _KNOWN


def get(name: Any, *, field: str = "vllm_version", flag: str | None = None) -> Release:
    """Release *name* (a :class:`Release` is returned as is); one not spoken for is refused,
    naming those there are."""
    if isinstance(name, Release):
        return name
    release = _KNOWN.get(name) if isinstance(name, str) else None
    if release is None:
        raise InvalidInputError.for_value(field, name, ", ".join(names()), flag=flag)
    return release


def env_value() -> str | None:
    """``$ENGINECFG_VLLM_VERSION`` as set (None: unset or empty), not yet checked."""
    return os.environ.get(RELEASE_ENV, "").strip() or None


def from_env() -> Release | None:
    """``$ENGINECFG_VLLM_VERSION`` (None: unset or empty); a release not spoken for is refused,
    naming the variable and the releases there are."""
    value = env_value()
    return None if value is None else get(value, flag=RELEASE_ENV)


def requested(name: Any = None) -> Release:
    """The release a run speaks for: *name*, else ``$ENGINECFG_VLLM_VERSION``, else the first."""
    if name is not None:
        return get(name)
    return from_env() or first()


def nearest(name: str, *, exact: bool = False) -> Release:
    """The release spoken for nearest to *name* (a version not spoken for, read from a log):
    the same one when spoken for; else the closest by version, the earlier on a tie.  With
    *exact*, only releases whose every decision follows their own rules (:attr:`Release.exact`)."""
    if known(name) and (not exact or _KNOWN[name].exact):
        return _KNOWN[name]
    key = version_key(name)

    def distance(r: Release) -> tuple[Any, ...]:
        k = r.key
        common = next((i for i in range(min(len(k), len(key))) if k[i] != key[i]), min(len(k), len(key)))
        # first the deepest shared prefix, then the nearest number at the first difference
        gap = abs(k[common] - key[common]) if common < min(len(k), len(key)) else 0
        return (-common, gap, k > key)

    return min((r for r in all_releases() if r.exact or not exact), key=distance)


def in_force(release: Release | None, rule_id: str) -> bool:
    """Whether the dated rule *rule_id* is in force for *release*; None stands for the latest
    release, where every rule is (how the shared machinery is asked without a release)."""
    return release is None or release.has(rule_id)


def brought_by(rule_id: str) -> Release | None:
    """The first release whose dated rules include *rule_id* (None: no release has it)."""
    return next((r for r in all_releases() if any(d.id == rule_id for d in r.adds)), None)


def rule(rule_id: str) -> DatedRule | None:
    release = brought_by(rule_id)
    return None if release is None else next(d for d in release.adds if d.id == rule_id)


def rules_between(old: Release, new: Release) -> frozenset[str]:
    """The dated rules in force in exactly one of *old* and *new* (what moving between them changes)."""
    return old.rules ^ new.rules
