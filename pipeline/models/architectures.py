"""What enginecfg knows about each vLLM 0.19.0 model architecture: one table of data.

Every decision that depends on the model class (is it hybrid, attention-free, does it
support Mamba prefix caching, which state calculator and which config fields size its
Mamba state, which per-layer KV-cache pattern its layers declare, which per-architecture
hook vLLM's ``MODELS_CONFIG_MAP`` runs) reads an :class:`ArchInfo` from
:data:`ARCHITECTURES`.  The code that *uses* the facts lives elsewhere (``mamba_state`` for
shapes, ``kv_specs`` for the layer patterns, the stages for hooks); keeping the facts as
data means a new architecture is one row, and a test can check every row.

Names are vLLM registry names (the strings in ``config.json`` ``architectures``).  Several
names can share one model class (``FalconMambaForCausalLM`` is ``mamba.MambaForCausalLM``);
each gets its own row so that lookups and hooks keyed by the registry name work.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Literal, Mapping, Sequence

import attrs

from enginecfg.pipeline.errors import InvalidInputError

__all__ = [
    "ArchInfo",
    "ARCHITECTURES",
    "pooling_convert_type",
    "GENERIC_ATTENTION",
    "HOOK_LEVELS",
    "ARCH_SUFFIXES",
    "lookup",
    "normalize",
    "is_hybrid",
]

Family = Literal["attention", "hybrid", "attention_free"]
#: the name of a per-layer KV-cache pattern: a key of :data:`enginecfg.pipeline.models.kv_specs.LAYOUTS`
KvLayout = str
StateKind = Literal["mamba1", "mamba2", "short_conv", "gated_delta_net", "kda", "linear_attention"]
StateSource = Literal["hf_config", "hf_text_config", "text_config", "nano_vl"]
NumSpecSource = Literal["none", "speculative", "vllm"]


@attrs.frozen(cache_hash=True)
class ArchInfo:
    """The class-level facts of one registry architecture.

    * ``family``: ``hybrid`` for classes that declare IsHybrid (whether a given *config*
      is hybrid also depends on its layer_types, see :func:`is_hybrid`),
      ``attention_free`` for IsAttentionFree, else ``attention``.
    * ``state_kind``: which Mamba-state calculator sizes the model's recurrent state
      (None: the class defines no state shapes).  ``state_recipe`` names the field
      mapping :mod:`enginecfg.pipeline.models.mamba_state` applies; rows that share a recipe read
      the same config fields.
    * ``state_source``: which config object the recipe reads: ``hf_config`` (the
      top-level config), ``hf_text_config`` (the text config vLLM derives), ``text_config``
      (``hf_config.text_config`` read directly) or ``nano_vl`` (the NemotronH recipe run
      on ``hf_config.text_config``, as the Nano-VL class does by swapping configs).
    * ``num_spec_source``: where the config-level shape reads speculative tokens:
      ``none`` (the calculator never gets them, or always 0), ``speculative``
      (``speculative_config.num_speculative_tokens`` or 0) or ``vllm``
      (``vllm_config.num_speculative_tokens``).  Both non-``none`` sources give the same
      number; they are kept apart because vLLM reads them from different objects.
    * ``config_hook``: the ``MODELS_CONFIG_MAP`` entry for this registry name (None: no
      entry); :data:`HOOK_LEVELS` says whether it runs at model or vllm level.
    * ``kv_layout``: which layers keep KV cache or state and of which kind, as the model
      class builds them (a pattern of :mod:`enginecfg.pipeline.models.kv_specs`).  None: a
      plain decoder (every layer full or sliding attention, or MLA) for an attention row;
      for a row with a Mamba state, a pattern enginecfg does not encode (its capacity
      figures record an error).  ``layer_prefix``: where the class keeps the decoder in
      vLLM's layer names (``language_model.`` for the multimodal classes).
    """

    name: str
    module_class: str
    family: Family
    is_hybrid_class: bool = False
    is_attention_free: bool = False
    supports_mamba_prefix_caching: bool = False
    is_pooling: bool = False
    state_kind: StateKind | None = None
    state_recipe: str | None = None
    state_source: StateSource | None = None
    num_spec_source: NumSpecSource = "none"
    config_hook: str | None = None
    kv_layout: KvLayout | None = None
    layer_prefix: str = ""

    @property
    def has_mamba_state(self) -> bool:
        """True when the class defines Mamba state shapes (and so a Mamba page size)."""
        return self.state_kind is not None


#: Which level each ``MODELS_CONFIG_MAP`` hook runs at: ``model`` (end of ModelConfig
#: construction) or ``vllm`` (first step of VllmConfig construction).
HOOK_LEVELS: Mapping[str, str] = MappingProxyType({
    "gemma4": "vllm",
    "nemotron_h": "vllm",
    "qwen3_5": "vllm",
    "mamba": "vllm",
    "llama_nemotron_vl": "model",
    "llama_bidirectional": "model",
    "jamba_seq_cls": "model",
    "nemotron_nano_vl": "model",
})


def _attention(name: str, module_class: str, *, pooling: bool = False, hook: str | None = None,
               layout: KvLayout | None = None, prefix: str = "") -> ArchInfo:
    return ArchInfo(name=name, module_class=module_class, family="attention",
                    is_pooling=pooling, config_hook=hook, kv_layout=layout, layer_prefix=prefix)


def _hybrid(name: str, module_class: str, kind: StateKind, recipe: str, layout: KvLayout | None, *,
            source: StateSource = "hf_config", mpc: bool = False, spec: NumSpecSource = "none",
            pooling: bool = False, hook: str | None = None, prefix: str = "") -> ArchInfo:
    return ArchInfo(name=name, module_class=module_class, family="hybrid", is_hybrid_class=True,
                    supports_mamba_prefix_caching=mpc, is_pooling=pooling, state_kind=kind,
                    state_recipe=recipe, state_source=source, num_spec_source=spec,
                    config_hook=hook, kv_layout=layout, layer_prefix=prefix)


def _attention_free(name: str, module_class: str, kind: StateKind | None, recipe: str | None,
                    layout: KvLayout | None, *, mpc: bool = False, spec: NumSpecSource = "none",
                    pooling: bool = False, hook: str | None = None) -> ArchInfo:
    return ArchInfo(name=name, module_class=module_class, family="attention_free",
                    is_attention_free=True, supports_mamba_prefix_caching=mpc,
                    is_pooling=pooling, state_kind=kind, state_recipe=recipe,
                    state_source="hf_config" if kind else None, num_spec_source=spec,
                    config_hook=hook, kv_layout=layout)


_LM = "language_model."  # a multimodal class's decoder, in vLLM's layer names

_ROWS: tuple[ArchInfo, ...] = (
    # --- hybrid attention + Mamba2 (MambaMixer2) -------------------------------------------
    _hybrid("BambaForCausalLM", "bamba.BambaForCausalLM", "mamba2", "bamba", "block_types", mpc=True),
    _hybrid("FalconH1ForCausalLM", "falcon_h1.FalconH1ForCausalLM", "mamba2", "falcon_h1",
            "falcon_h1", mpc=True),
    _hybrid("GraniteMoeHybridForCausalLM", "granitemoehybrid.GraniteMoeHybridForCausalLM",
            "mamba2", "bamba", "block_types", mpc=True),
    _hybrid("NemotronHForCausalLM", "nemotron_h.NemotronHForCausalLM", "mamba2", "nemotron_h",
            "nemotron_h", mpc=True, spec="vllm", hook="nemotron_h"),
    _hybrid("NemotronHPuzzleForCausalLM", "nemotron_h.NemotronHForCausalLM", "mamba2",
            "nemotron_h", "nemotron_h", mpc=True, spec="vllm", hook="nemotron_h"),
    # Runs the NemotronH recipe on its text config; no MPC and no NemotronH ssm-dtype hook.
    _hybrid("NemotronH_Nano_VL_V2", "nano_nemotron_vl.NemotronH_Nano_VL_V2", "mamba2",
            "nemotron_h", "nemotron_h", source="nano_vl", spec="vllm", hook="nemotron_nano_vl"),
    _hybrid("Zamba2ForCausalLM", "zamba2.Zamba2ForCausalLM", "mamba2", "zamba2", "zamba2", mpc=True),
    _hybrid("Plamo2ForCausalLM", "plamo2.Plamo2ForCausalLM", "mamba2", "plamo2", "plamo2"),
    # --- hybrid attention + Mamba1 ---------------------------------------------------------
    _hybrid("JambaForCausalLM", "jamba.JambaForCausalLM", "mamba1", "jamba", "block_types", mpc=True),
    _hybrid("JambaForSequenceClassification", "jamba.JambaForSequenceClassification", "mamba1",
            "jamba", "block_types", mpc=True, pooling=True, hook="jamba_seq_cls"),
    # --- hybrid attention + gated delta net ------------------------------------------------
    _hybrid("Qwen3NextForCausalLM", "qwen3_next.Qwen3NextForCausalLM", "gated_delta_net", "gdn",
            "layer_types", source="hf_text_config", spec="speculative"),
    _hybrid("Qwen3_5ForConditionalGeneration", "qwen3_5.Qwen3_5ForConditionalGeneration",
            "gated_delta_net", "gdn", "layer_types", source="hf_text_config", spec="speculative",
            hook="qwen3_5", prefix=_LM),
    _hybrid("Qwen3_5MoeForConditionalGeneration", "qwen3_5.Qwen3_5MoeForConditionalGeneration",
            "gated_delta_net", "gdn", "layer_types", source="hf_text_config", spec="speculative",
            hook="qwen3_5", prefix=_LM),
    _hybrid("ColQwen3_5", "colqwen3_5.ColQwen3_5Model", "gated_delta_net", "gdn", "layer_types",
            source="hf_text_config", spec="speculative", pooling=True, hook="qwen3_5"),
    _hybrid("OlmoHybridForCausalLM", "olmo_hybrid.OlmoHybridForCausalLM", "gated_delta_net",
            "gdn", "olmo_hybrid", spec="speculative"),
    # --- hybrid attention + KDA ------------------------------------------------------------
    # The calculator takes num_spec but ignores it.  Its full-attention layers are MLA with
    # latent sizes of their own: the layer pattern is not encoded.
    _hybrid("KimiLinearForCausalLM", "kimi_linear.KimiLinearForCausalLM", "kda", "kimi_linear",
            None, spec="speculative"),
    # --- hybrid attention + short convolution ----------------------------------------------
    _hybrid("Lfm2ForCausalLM", "lfm2.Lfm2ForCausalLM", "short_conv", "lfm2", "short_conv"),
    _hybrid("ColBERTLfm2Model", "colbert.ColBERTLfm2Model", "short_conv", "lfm2", "short_conv",
            pooling=True),
    _hybrid("Lfm2MoeForCausalLM", "lfm2_moe.Lfm2MoeForCausalLM", "short_conv", "lfm2_moe",
            "short_conv"),
    _hybrid("Lfm2VlForConditionalGeneration", "lfm2_vl.Lfm2VLForConditionalGeneration",
            "short_conv", "lfm2_moe", "short_conv", source="text_config"),
    # --- hybrid attention + lightning/linear attention -------------------------------------
    _hybrid("MiniMaxForCausalLM", "minimax_text_01.MiniMaxText01ForCausalLM",
            "linear_attention", "minimax", "minimax"),
    _hybrid("MiniMaxText01ForCausalLM", "minimax_text_01.MiniMaxText01ForCausalLM",
            "linear_attention", "minimax", "minimax"),
    _hybrid("MiniMaxM1ForCausalLM", "minimax_text_01.MiniMaxText01ForCausalLM",
            "linear_attention", "minimax", "minimax"),
    # Its full-attention layers are MLA too: the layer pattern is not encoded.
    _hybrid("BailingMoeV2_5ForCausalLM", "bailing_moe_linear.BailingMoeV25ForCausalLM",
            "linear_attention", "bailing", None),
    # --- attention-free --------------------------------------------------------------------
    _attention_free("MambaForCausalLM", "mamba.MambaForCausalLM", "mamba1", "mamba", "mamba_only",
                    mpc=True, hook="mamba"),
    _attention_free("FalconMambaForCausalLM", "mamba.MambaForCausalLM", "mamba1", "mamba",
                    "mamba_only", mpc=True, hook="mamba"),
    _attention_free("Mamba2ForCausalLM", "mamba2.Mamba2ForCausalLM", "mamba2", "mamba2",
                    "mamba_only", mpc=True, spec="vllm", hook="mamba"),
    # Registered among vLLM's embedding (pooling) models; no state, no hook.
    _attention_free("Terratorch", "terratorch.Terratorch", None, None, None, pooling=True),
    _attention_free("PrithviGeoSpatialMAE", "terratorch.Terratorch", None, None, None, pooling=True),
    # --- attention-only models the fixtures and hooks name ---------------------------------
    _attention("LlamaForCausalLM", "llama.LlamaForCausalLM"),
    _attention("MistralForCausalLM", "llama.LlamaForCausalLM"),
    _attention("Qwen2ForCausalLM", "qwen2.Qwen2ForCausalLM"),
    _attention("Qwen3ForCausalLM", "qwen3.Qwen3ForCausalLM"),
    _attention("Qwen3MoeForCausalLM", "qwen3_moe.Qwen3MoeForCausalLM"),
    _attention("Gemma4ForCausalLM", "gemma4.Gemma4ForCausalLM", hook="gemma4", layout="gemma4"),
    _attention("Gemma4ForConditionalGeneration", "gemma4_mm.Gemma4ForConditionalGeneration",
               hook="gemma4", layout="gemma4", prefix=_LM),
    _attention("DeepseekV2ForCausalLM", "deepseek_v2.DeepseekV2ForCausalLM"),
    _attention("DeepseekV3ForCausalLM", "deepseek_v2.DeepseekV3ForCausalLM"),
    _attention("LlamaNemotronVLModel", "nemotron_vl.LlamaNemotronVLForEmbedding", pooling=True,
               hook="llama_nemotron_vl"),
    _attention("LlamaNemotronVLForSequenceClassification",
               "nemotron_vl.LlamaNemotronVLForSequenceClassification", pooling=True,
               hook="llama_nemotron_vl"),
    # Registered among the embedding and sequence-classification models; their hook makes
    # attention bidirectional, so the layers are encoder-only and keep no KV cache (kv_specs
    # reads hf_config.is_causal): a plain decoder's layer pattern otherwise.
    _attention("LlamaBidirectionalModel", "llama.LlamaBidirectionalModel", pooling=True,
               hook="llama_bidirectional"),
    _attention("LlamaBidirectionalForSequenceClassification",
               "llama.LlamaBidirectionalForSequenceClassification", pooling=True,
               hook="llama_bidirectional"),
    # Draft / MTP classes are neither hybrid nor attention-free.
    _attention("Qwen3NextMTP", "qwen3_next_mtp.Qwen3NextMTP"),
    _attention("Qwen3_5MTP", "qwen3_5_mtp.Qwen3_5MTP"),
    _attention("Qwen3_5MoeMTP", "qwen3_5_mtp.Qwen3_5MoeMTP"),
    _attention("NemotronHMTP", "nemotron_h_mtp.NemotronHMTP"),
)

#: Every architecture enginecfg knows, by registry name.
ARCHITECTURES: Mapping[str, ArchInfo] = MappingProxyType({row.name: row for row in _ROWS})

#: What an architecture vLLM does not register resolves to: the Transformers backend,
#: a plain attention decoder (not hybrid, not attention-free, no state, no hook).
GENERIC_ATTENTION = ArchInfo(name="TransformersForCausalLM",
                             module_class="transformers.TransformersForCausalLM",
                             family="attention")

#: vLLM's runner and convert defaults by name suffix, for a class it does not register:
#: the first suffix a name ends with decides (generation, or pooling with a conversion)
SUFFIX_DEFAULTS: tuple[tuple[str, str, str], ...] = (
    ("ForCausalLM", "generate", "none"),
    ("ForConditionalGeneration", "generate", "none"),
    ("ChatModel", "generate", "none"),
    ("LMHeadModel", "generate", "none"),
    ("ForTextEncoding", "pooling", "embed"),
    ("EmbeddingModel", "pooling", "embed"),
    ("ForSequenceClassification", "pooling", "classify"),
    ("ForTokenClassification", "pooling", "classify"),
    ("ForAudioClassification", "pooling", "classify"),
    ("ForImageClassification", "pooling", "classify"),
    ("ForVideoClassification", "pooling", "classify"),
    ("ClassificationModel", "pooling", "classify"),
    ("ForRewardModeling", "pooling", "embed"),
    ("RewardModel", "pooling", "embed"),
    ("Model", "pooling", "embed"),
)

#: The suffixes vLLM normalises unregistered names with, in its order (longer suffixes that
#: end in "Model" come before the bare "Model").
ARCH_SUFFIXES: tuple[str, ...] = tuple(suffix for suffix, _, _ in SUFFIX_DEFAULTS)


def pooling_convert_type(name: str) -> str:
    """How vLLM converts class *name* to run under ``--runner pooling``: the convert type of
    the first suffix whose default runner is the pooling one, else ``embed``."""
    return next((convert for suffix, runner, convert in SUFFIX_DEFAULTS
                 if runner == "pooling" and name.endswith(suffix)), "embed")


def default_is_embedding(name: str) -> bool:
    """Does vLLM's suffix table make an unregistered class *name* a pooling model converted
    to embedding (as it does the bare ``*Model`` transformers names as a type's default)?"""
    match = next(((runner, convert) for suffix, runner, convert in SUFFIX_DEFAULTS if name.endswith(suffix)),
                 None)
    return match == ("pooling", "embed")


def normalize(name: str) -> str | None:
    """The registered name an architecture name resolves to, or None.

    A registered name is itself.  Otherwise the first suffix of :data:`ARCH_SUFFIXES` the
    name ends with is replaced (vLLM uses ``str.replace``, so every occurrence) by each
    suffix in table order, and the first registered result wins: e.g.
    ``Qwen3NextForSequenceClassification`` -> ``Qwen3NextForCausalLM``.  vLLM also filters
    the suffix match by runner and convert type; enginecfg does not need that filter for
    the architectures it knows, so it is left out.
    """
    if name in ARCHITECTURES:
        return name
    suffix = next((s for s in ARCH_SUFFIXES if name.endswith(s)), None)
    if suffix is None:
        return None
    for repl in ARCH_SUFFIXES:
        candidate = name.replace(suffix, repl)
        if candidate in ARCHITECTURES:
            return candidate
    return None


def lookup(architectures: Sequence[str]) -> tuple[str, ArchInfo]:
    """Pick the architecture vLLM would pick from a config's ``architectures`` list.

    Returns ``(name, info)``: ``name`` is the entry as the config spells it (vLLM's
    ``model_config.architecture``, the key of its hook map) and ``info`` the facts of the
    class it resolved to.  Entries are tried in order; the first that is registered, or
    normalises to a registered name, wins.  When none does, the result is the first entry
    with :data:`GENERIC_ATTENTION` (vLLM would load it through its Transformers backend
    and report that backend's class name; its flags are the ones given here).
    """
    if isinstance(architectures, str) or not isinstance(architectures, Sequence):
        raise InvalidInputError.for_value("hf_config.architectures", architectures,
                                          "a list of architecture names")
    names = list(architectures)
    if not names:
        raise InvalidInputError(
            "invalid hf_config.architectures: got []; allowed: at least one architecture name "
            "(set 'architectures' in config.json or pass hf_overrides={'architectures': [...]})",
            field="hf_config.architectures")
    for name in names:
        if not isinstance(name, str):
            raise InvalidInputError.for_value("hf_config.architectures", names,
                                              "a list of architecture names (strings)")
    for name in names:
        resolved = normalize(name)
        if resolved is not None:
            return name, ARCHITECTURES[resolved]
    return names[0], GENERIC_ATTENTION


def is_hybrid(info: ArchInfo, hf_config: Any) -> bool:
    """``ModelConfig.is_hybrid``: the class is hybrid and the config has non-attention layers.

    ``layer_types`` is read from the *top-level* config.  Absent or None means hybrid;
    otherwise the config is hybrid unless every entry is the literal ``"attention"`` (the
    granite-4.0-micro case).  ``"full_attention"`` is a different string, so an LFM2
    config with only full-attention layers is still hybrid.
    """
    if not info.is_hybrid_class:
        return False
    from enginecfg.pipeline.hf import typed

    # vLLM iterates whatever it finds (a string by character, an object by key) and crashes
    # on a number: the typed read refuses only what vLLM cannot iterate
    layer_types = typed.attr(hf_config, "layer_types", typed.LIST, typed.STR, typed.OBJECT)
    if layer_types is None:
        return True
    return not all(lt == "attention" for lt in layer_types)
