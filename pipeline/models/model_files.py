"""What vLLM 0.19.0 reads from the files beside ``config.json`` while it builds its config.

Each function takes a *source* (anything with ``read_json(name)`` returning the parsed file
or None, and ``listed(name)`` saying whether the model has the file, e.g.
:class:`enginecfg.pipeline.hf.sources.ModelSource`) and returns what vLLM derives from it.
In vLLM's order:

- :func:`hf_quant_config` -- ``hf_quant_config.json``, where ``config.json`` has no
  ``quantization_config`` (ModelOpt 0.29 and earlier keep their quantization there): vLLM puts
  the whole file on the config as its ``quantization_config``;
- :func:`sentence_transformers_encoder` -- the ``sentence_*_config.json`` file vLLM keeps
  when it holds both ``max_seq_length`` and ``do_lower_case``; its ``max_seq_length``
  replaces the derived max_model_len (for every model, not only pooling ones);
- :func:`image_processor_files` -- ``processor_config.json`` and ``preprocessor_config.json``,
  which transformers looks up for every model while vLLM builds the config (nothing of
  theirs changes what enginecfg resolves; they are read so that the source record lists
  them);
- :func:`sentence_transformers_pooling` -- ``modules.json`` and the Pooling module's
  ``config.json``: the sequence / token pooling types and whether a Normalize module follows.
  A checkpoint that has one is a pooling model, whatever its architecture says;
- :func:`tokenizer_config` -- ``tokenizer_config.json``; its ``model_max_length`` caps the
  derived length of pooling models with absolute position embeddings.

``hf_quant_config.json``, ``modules.json`` and the sentence-transformers settings are found
as vLLM finds them (``listed``: in a repo, by its file list); the others are asked for.
``generation_config.json`` is not read here: vLLM 0.19.0 reads it only when it serves
requests (sampling defaults), never while building the engine config.
"""

from __future__ import annotations

from typing import Any

from enginecfg.pipeline.errors import InvalidInputError

__all__ = ["SENTENCE_CONFIG_FILES", "SEQ_POOLING_TYPES", "TOK_POOLING_TYPES", "IMAGE_PROCESSOR_FILES",
           "hf_quant_config", "image_processor_files", "sentence_transformers_pooling",
           "sentence_transformers_encoder", "tokenizer_config", "pooling_type_name"]

#: the sentence-transformers tokenizer settings files, in the order vLLM looks for them
SENTENCE_CONFIG_FILES = (
    "sentence_bert_config.json",
    "sentence_roberta_config.json",
    "sentence_distilbert_config.json",
    "sentence_camembert_config.json",
    "sentence_albert_config.json",
    "sentence_xlm-roberta_config.json",
    "sentence_xlnet_config.json",
)
#: what transformers looks up for every model while vLLM builds its config
IMAGE_PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")
SEQ_POOLING_TYPES = ("CLS", "LAST", "MEAN")
TOK_POOLING_TYPES = ("ALL", "STEP")
_POOLING_MODULE = "sentence_transformers.models.Pooling"
_NORMALIZE_MODULE = "sentence_transformers.models.Normalize"


def pooling_type_name(key: str) -> str:
    """A Pooling module's ``pooling_mode_*`` key as vLLM names the pooling type
    (``pooling_mode_cls_token`` -> ``CLS``, ``pooling_mode_lasttoken`` -> ``LAST``)."""
    name = key.replace("pooling_mode_", "") if "pooling_mode_" in key else key
    if "_" in name:
        name = name.split("_", 1)[0]
    if "lasttoken" in name:
        name = "last"
    return name.upper()


def sentence_transformers_pooling(source: Any) -> dict[str, Any] | None:
    """``{"use_activation", "seq_pooling_type"?, "tok_pooling_type"?}`` from a
    sentence-transformers checkpoint's modules, or None when it has no Pooling module."""
    modules = source.read_json("modules.json") if source.listed("modules.json") else None
    if modules is None:
        return None
    if not isinstance(modules, list) or not all(isinstance(m, dict) and "type" in m for m in modules):
        raise InvalidInputError(f"invalid modules.json: got {modules!r:.120}; allowed: a list of "
                                f"sentence-transformers modules, each with a 'type'", field="modules.json")
    pooling = next((m for m in modules if m["type"] == _POOLING_MODULE), None)
    if pooling is None:
        return None
    normalize = any(m["type"] == _NORMALIZE_MODULE for m in modules)
    path = pooling.get("path")
    if not isinstance(path, str):
        raise InvalidInputError(f"invalid modules.json: the Pooling module's path is {path!r}; allowed: "
                                f"the module folder's name", field="modules.json")
    settings = source.read_json(f"{path}/config.json") or {}
    if not isinstance(settings, dict):
        raise InvalidInputError(f"invalid {path}/config.json: got a JSON {type(settings).__name__}; allowed: "
                                f"a JSON object of pooling settings", field=f"{path}/config.json")
    out: dict[str, Any] = {"use_activation": normalize}
    for key, value in settings.items():
        if value is True:
            kind = pooling_type_name(key)
            if kind in SEQ_POOLING_TYPES:
                out["seq_pooling_type"] = kind
            elif kind in TOK_POOLING_TYPES:
                out["tok_pooling_type"] = kind
    return out


def sentence_transformers_encoder(source: Any) -> dict[str, Any] | None:
    """The sentence-transformers tokenizer settings vLLM keeps, or None.

    The first of :data:`SENTENCE_CONFIG_FILES` that exists and is not empty is the one; it
    counts only if it has both ``max_seq_length`` and ``do_lower_case``.
    """
    for name in SENTENCE_CONFIG_FILES:
        found = source.read_json(name) if source.listed(name) else None
        if found:
            if not isinstance(found, dict):
                raise InvalidInputError(f"invalid {name}: got a JSON {type(found).__name__}; allowed: a JSON "
                                        f"object", field=name)
            return found if all(k in found for k in ("max_seq_length", "do_lower_case")) else None
    return None


def hf_quant_config(source: Any) -> dict[str, Any] | None:
    """``hf_quant_config.json`` as vLLM puts it on the config (None when there is none); only
    asked for where ``config.json`` has no ``quantization_config``."""
    if not source.listed("hf_quant_config.json"):
        return None
    found = source.read_json("hf_quant_config.json")
    if found is not None and not isinstance(found, dict):
        raise InvalidInputError(f"invalid hf_quant_config.json: got a JSON {type(found).__name__}; allowed: a "
                                f"JSON object (the checkpoint's quantization settings)",
                                field="hf_quant_config.json")
    return found


def image_processor_files(source: Any) -> None:
    """Read the image-processor settings files transformers looks up while vLLM builds the
    config (so that the source record lists them, or their absence); nothing of theirs
    changes the resolved config.  A file that is no JSON is bad input naming it."""
    for name in IMAGE_PROCESSOR_FILES:
        source.read_json(name)


def tokenizer_config(source: Any) -> dict[str, Any] | None:
    """``tokenizer_config.json`` (None when absent or empty, as vLLM then ignores it)."""
    found = source.read_json("tokenizer_config.json")
    if found and not isinstance(found, dict):
        raise InvalidInputError(f"invalid tokenizer_config.json: got a JSON {type(found).__name__}; allowed: "
                                f"a JSON object", field="tokenizer_config.json")
    return found or None
