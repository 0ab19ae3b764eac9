"""Out-of-process transformers loader.

It is the only place that imports transformers on enginecfg's behalf, so the calling
process never pays for (or imports) transformers and torch.  Offline,
``trust_remote_code=False``: remote code named by ``auto_map`` is never run.

Two ways to run it:

``python -m enginecfg.pipeline.hf._worker``
    one shot: reads ``{"items": [{"config": {...}}]}`` as JSON on stdin and writes
    ``{"results": [snapshot | {"error": {...}}]}`` on stdout.

``python -m enginecfg.pipeline.hf._worker --serve``
    long-lived (what :mod:`.cache` starts once per process): one JSON request per line on
    stdin, one JSON answer per line on stdout, answered in order.  Requests are ``{"id": n,
    "op": "snapshots", "items": [...]}`` (answer ``{"id": n, "results": [...]}``) and
    ``{"id": n, "op": "ping"}`` (answer ``{"id": n, "pid": ...}``).  A request that cannot be
    handled is answered with ``{"id": n, "fail": text}``; the worker carries on.  It never
    outlives the process that started it: it exits when its stdin closes (the parent exited
    or closed it), and on Linux the kernel kills it when the parent dies
    (``PR_SET_PDEATHSIG``), checked once more after arming in case the parent was already
    gone.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def _generic(config_dict: dict[str, Any]):
    """A config of an architecture transformers does not know: all fields kept as attributes."""
    from transformers import PretrainedConfig

    cfg = PretrainedConfig(**{k: v for k, v in config_dict.items() if k != "model_type"})
    model_type = config_dict.get("model_type")
    if model_type is not None:
        cfg.model_type = model_type  # instance attribute; the class has an empty one
    return cfg


def _known_model_type(model_type: Any) -> bool:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return isinstance(model_type, str) and model_type in CONFIG_MAPPING


#: ``getattr(torch, name)`` for the dtype names config files use, as a snapshot stores it.
#: With torch importable, transformers turns a config's ``dtype`` string into that torch
#: object; the worker does the same from this table, so it never imports torch (tests check
#: every entry against torch itself).  Any other string makes the worker import torch.
TORCH_DTYPE_NAMES = {
    "float32": "float32", "float": "float32", "float64": "float64", "double": "float64",
    "float16": "float16", "half": "float16", "bfloat16": "bfloat16",
    "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
    "float8_e4m3fnuz": "float8_e4m3fnuz", "float8_e5m2fnuz": "float8_e5m2fnuz",
    "int8": "int8", "uint8": "uint8", "int16": "int16", "short": "int16", "int32": "int32",
    "int": "int32", "int64": "int64", "long": "int64", "bool": "bool",
}
_DTYPE_KEYS = ("dtype", "torch_dtype")


def without_torch() -> None:
    """Make transformers in this process see no torch (unless torch is imported already).

    Building a config needs nothing of torch but the dtype names above, and importing it
    costs more than transformers itself: it is what made a new config cost 3x ``import
    transformers`` from the command line.
    """
    if "torch" not in sys.modules:
        sys.modules["torch"] = None  # import machinery and find_spec both read this as absent


def plain_models_package() -> None:
    """Import ``transformers.models`` as a plain package, without its lazy index.

    The index (``transformers/models/__init__.py``) reads the import structure of every
    model folder, some 0.4 s: a third of a new config's cost from the command line.  The
    worker needs one config class, which its own folder's ``__init__`` finds as it always
    does; submodules resolve through the package's path, so every class is the same one
    (tests compare the worker's snapshots with transformers imported the usual way).
    """
    if "transformers.models" in sys.modules:
        return
    import importlib.machinery
    import importlib.util

    spec = importlib.util.find_spec("transformers.models")
    if spec is None or not spec.submodule_search_locations:
        return
    package = importlib.util.module_from_spec(
        importlib.machinery.ModuleSpec("transformers.models", None, is_package=True))
    package.__path__ = list(spec.submodule_search_locations)
    package.__file__ = spec.origin
    sys.modules["transformers.models"] = package


def _torch_hidden() -> bool:
    return "torch" in sys.modules and sys.modules["torch"] is None


def _allow_torch() -> None:
    """Undo :func:`without_torch`, for a config whose dtype only torch can name."""
    if _torch_hidden():
        del sys.modules["torch"]
        from transformers.utils import import_utils

        import_utils.is_torch_available.cache_clear()


def _dtype_strings(value: Any, depth: int = 0):
    if depth > 8:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if key in _DTYPE_KEYS and isinstance(item, str):
                yield item
            yield from _dtype_strings(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            yield from _dtype_strings(item, depth + 1)


def _name_dtypes(cfg: Any, depth: int = 0) -> None:
    """Do to each (nested) config's ``dtype`` string what transformers does with torch."""
    if depth > 6 or not hasattr(cfg, "attribute_map"):
        return
    dtype = vars(cfg).get("dtype")
    if isinstance(dtype, str) and dtype in TORCH_DTYPE_NAMES:
        cfg.dtype = TORCH_DTYPE_NAMES[dtype]
    for value in list(vars(cfg).values()):
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if hasattr(item, "attribute_map") and item is not cfg:
                _name_dtypes(item, depth + 1)


def load_config(config_dict: dict[str, Any]):
    """The config object vLLM 0.19.0 reads: for the model types where vLLM registers its own
    config class, the config as that class builds it (see :mod:`.vllm_classes`)."""
    cfg = _load_config(config_dict)
    if _torch_hidden():
        _name_dtypes(cfg)
    return cfg


def _load_config(config_dict: dict[str, Any]):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from enginecfg.pipeline.hf.vllm_classes import apply

    if _torch_hidden() and any(name not in TORCH_DTYPE_NAMES for name in _dtype_strings(config_dict)):
        _allow_torch()
    config_dict, build, failed = apply(config_dict)
    if failed is not None:
        # vLLM's class asserts these (a bare AssertionError): bad input, named as a field error
        raise AssertionError(f"Validation error for field '{failed}': vLLM 0.19.0's "
                             f"{config_dict.get('model_type')} config class refuses its value "
                             f"{config_dict.get(failed)!r}")
    if build == "plain":
        return _generic(config_dict)
    if build == "vllm_class":
        from enginecfg.pipeline.hf._classes import build as build_vllm_class

        return build_vllm_class(config_dict)
    model_type = config_dict.get("model_type")
    if _known_model_type(model_type):
        cls = CONFIG_MAPPING[model_type]
        return cls.from_dict(dict(config_dict))
    if "model_type" in config_dict and "auto_map" not in config_dict and _refused_type(model_type):
        # (a config naming its own code keeps the generic build: vLLM would run that code
        # with trust_remote_code, enginecfg never does, and the generic build is the closest)
        _raise_as_transformers(model_type)
    return _generic(config_dict)


def _refused_type(model_type: Any) -> bool:
    """A model type neither transformers nor vLLM has a class for (a scalar: a list or an
    object never reaches transformers' lookup in vLLM's loader)."""
    from enginecfg.pipeline.hf.vllm_classes import VLLM_REGISTERED_TYPES

    if not (model_type is None or isinstance(model_type, (str, int, float, bool))):
        return False
    return not (isinstance(model_type, str) and model_type in VLLM_REGISTERED_TYPES)


def _raise_as_transformers(model_type: Any) -> None:
    """Raise what transformers' ``AutoConfig`` raises for a config of this model type.

    vLLM loads such a config through ``AutoConfig.from_pretrained``, which refuses a type
    it does not know; the refusal is asked of transformers itself, from a folder holding
    only that type, so its wording is transformers' own.
    """
    import tempfile

    from transformers import AutoConfig

    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "config.json"), "w") as fh:
            json.dump({"model_type": model_type}, fh)
        AutoConfig.from_pretrained(folder)
    raise AssertionError(f"transformers accepted model type {model_type!r}")  # not reached


def default_architecture(model_type: Any) -> str | None:
    try:
        from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES
    except Exception:
        return None
    return MODEL_MAPPING_NAMES.get(model_type) if isinstance(model_type, str) else None


def snapshot_item(item: dict[str, Any]) -> dict[str, Any]:
    from enginecfg.pipeline.hf.snapshot import snapshot_of

    config_dict = item["config"]
    try:
        cfg = load_config(config_dict)
    except Exception as exc:  # transformers refused the config: that is vLLM's answer too
        return {"error": {"type": type(exc).__name__, "message": str(exc)}}
    snap = snapshot_of(cfg)
    snap["default_architecture"] = default_architecture(snap.get("model_type"))
    return snap


#: the variable through which the parent tells the worker its pid (for the orphan check)
PARENT_ENV = "ENGINECFG_HF_PARENT"


def _die_with_parent() -> None:
    """Arrange to be killed when the parent dies; exit now if it already has."""
    expected = os.environ.get(PARENT_ENV)
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            import signal

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except Exception:  # no libc / no prctl: stdin EOF still ends the worker
            pass
    if expected and str(os.getppid()) != expected:
        os._exit(0)


def _answer(request: Any) -> dict[str, Any]:
    if not isinstance(request, dict):
        return {"id": None, "fail": "a request must be a JSON object"}
    rid = request.get("id")
    op = request.get("op", "snapshots")
    try:
        if op == "snapshots":
            return {"id": rid, "results": [snapshot_item(item) for item in request["items"]]}
        if op == "ping":
            return {"id": rid, "pid": os.getpid()}
        return {"id": rid, "fail": f"unknown op {op!r}"}
    except Exception as exc:  # a malformed request must not end the worker
        return {"id": rid, "fail": f"{type(exc).__name__}: {exc}"}


def serve(stdin=None, stdout=None) -> int:
    """Answer requests, one per line, until stdin closes."""
    _die_with_parent()
    stdin = stdin if stdin is not None else sys.stdin.buffer
    if stdout is None:
        # answers go to a private copy of fd 1; whatever a library prints goes to stderr
        stdout = os.fdopen(os.dup(1), "wb")
        os.dup2(2, 1)
    without_torch()
    plain_models_package()
    # pay for transformers now: the parent overlaps its own work with this import
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: F401

    # ``from_dict`` formats each config for an info line (most of its time for Qwen3.5);
    # that formatting is kept: it can raise on values the constructor accepted, and vLLM's
    # ``from_pretrained`` raises with it

    for line in stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as exc:
            answer = {"id": None, "fail": f"not JSON: {exc}"}
        else:
            answer = _answer(request)
        stdout.write(json.dumps(answer, default=str).encode() + b"\n")
        stdout.flush()
    return 0


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if "--serve" in sys.argv[1:]:
        return serve()
    without_torch()
    plain_models_package()
    request = json.load(sys.stdin)
    results = [snapshot_item(item) for item in request["items"]]
    json.dump({"results": results}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
