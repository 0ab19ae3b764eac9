"""Fuzzed inputs: every outcome is a resolved run or an enginecfg error naming the field.

Both inputs a user controls are fuzzed with hypothesis: the model config (real fixture
configs with the fields the loader and the stages read replaced, deleted or inserted, with
arbitrary JSON values, nested text configs included) and the engine arguments (every name in
``engine_args.ENGINE_ARGS`` with arbitrary values, plus unknown names).  Never another
exception, never a hang (a per-example alarm).  The seed is fixed (``derandomize``) and the
number of examples bounded; ``ENGINECFG_FUZZ_EXAMPLES`` scales every test for a long run and
``ENGINECFG_FUZZ_SEED`` picks a different seed (see docs/fuzzing.md).

The CLI is fed malformed and unreadable files and unreachable databases: exit 2, one line on
stderr, no traceback.  Tests run as root, where ``chmod 000`` does not stop a read, so the
unreadable inputs are a directory named ``config.json``, a FIFO and a device.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from support import CONFIGS, run_cli
from enginecfg import EngineCfgError, EngineConfig, InvalidInputError, Pipeline
from enginecfg.pipeline.config import ATTENTION_BACKENDS
from enginecfg.pipeline.errors import StageError
from enginecfg.pipeline.hf import cache as hfcache
from enginecfg.pipeline.engine_args import ENGINE_ARGS

# -- settings --------------------------------------------------------------------------------

_SCALE = int(os.environ.get("ENGINECFG_FUZZ_EXAMPLES", "0") or 0)
_SEED = os.environ.get("ENGINECFG_FUZZ_SEED")
_EXAMPLE_TIMEOUT_S = 30


def _fuzz(ci_examples: int):
    """hypothesis settings: fixed seed, bounded examples, no deadline (CI machines vary)."""
    n = _SCALE or ci_examples
    s = settings(max_examples=n, deadline=None, derandomize=_SEED is None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                        HealthCheck.filter_too_much])

    def wrap(fn):
        fn = s(fn)
        return seed(int(_SEED))(fn) if _SEED is not None else fn
    return wrap


@pytest.fixture(scope="module", autouse=True)
def _transformers_in_process():
    """Build snapshots in this process: a worker per new fuzzed config would dominate."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hfcache, "_in_process", lambda: True)
        _load_transformers()
        yield


def _load_transformers() -> None:
    """Import transformers (and torch) and the config module of every base config's model
    type, by building the base configs' snapshots, with the cyclic collector paused, then
    freeze what exists: several hundred thousand long-lived objects that every full
    collection would otherwise walk again (measured: ~14 full collections, 2-3 s, in one run
    of this file and tests/test_faults.py).  The examples still build every fuzzed config's
    snapshot with transformers; only the import happens here instead of in the first ones."""
    import gc

    from enginecfg.pipeline.hf.cache import snapshots_for

    gc.disable()
    try:
        snapshots_for([json.loads(json.dumps(cfg)) for cfg in BASES.values()])
    finally:
        gc.enable()
    gc.freeze()


class _Hang(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Fail the example (not the whole session) if it runs longer than ``seconds``."""
    def on_alarm(signum, frame):
        raise _Hang(f"no answer after {seconds}s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# -- the inputs ------------------------------------------------------------------------------

BASE_NAMES = ["nemotron-3-nano-30b-a3b-bf16", "qwen3.5-27b", "gemma-4-26b-a4b", "mamba-130m-hf",
              "jamba-1.5-mini", "nemotron-vl-embed-avg", "zamba2-default", "qwen3-next-default",
              "falcon-h1-default", "deepseek-v2-lite-like", "lfm2-default", "mamba2-default",
              "nemotron-3-nano-30b-a3b-nvfp4", "gemma-4-26b-a4b-nvfp4", "minimax-default",
              "qwen3.6-27b-nvfp4"]
BASES = {name: json.loads((CONFIGS / name / "config.json").read_text()) for name in BASE_NAMES}

#: the fields the loader and the stages read (and a few they must ignore)
FIELDS = [
    "architectures", "model_type", "num_attention_heads", "num_key_value_heads", "head_dim",
    "global_head_dim", "hidden_size", "max_position_embeddings", "model_max_length", "num_hidden_layers",
    "intermediate_size", "mamba_num_heads", "mamba_head_dim", "mamba_d_state", "mamba_d_conv",
    "mamba_expand", "mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_d_ssm", "mamba_chunk_size",
    "mamba_ssm_dtype", "mamba_ssm_cache_dtype", "ssm_state_size", "state_size", "expand", "time_step_rank",
    "chunk_size", "n_groups", "conv_kernel", "linear_num_key_heads", "linear_num_value_heads",
    "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim", "linear_attn_config",
    "layer_types", "layers_block_type", "hybrid_override_pattern", "attn_layer_offset", "attn_layer_period",
    "attention_head_dim", "n_mamba_heads", "short_conv_kernel_size", "kv_lora_rank", "qk_rope_head_dim",
    "text_config", "llm_config", "vision_config", "pooling", "quantization_config", "rope_parameters",
    "rope_scaling", "torch_dtype", "dtype", "is_causal", "is_encoder_decoder", "sliding_window",
    "patch_size", "num_experts", "vocab_size", "tie_word_embeddings",
    # keys of the nested sections (quantization, rope)
    "quant_method", "quant_algo", "quantized_layers", "kv_cache_scheme", "kv_cache_quant_algo",
    "ignore", "group_size", "rope_type", "rope_theta", "factor", "mrope_section",
]
_NESTED = ("top", "text_config", "llm_config", "vision_config", "quantization_config", "rope_parameters")

_WORDS = ["", "auto", "bfloat16", "float16", "float32", "fp8", "float64", "mamba", "attention",
          "full_attention", "linear_attention", "sliding_attention", "conv", "mean", "avg", "cls", "last",
          "modelopt", "NVFP4", "yarn", "longrope", "llama", "qwen3_5", "gemma4", "nemotron_h", "M*-",
          "\x00", "é", "LlamaForCausalLM",
          # lone surrogates: a \udXXX escape in config.json, a file name's undecodable byte
          "Qwen\ud800ForCausalLM", "caf\udce9"]
_EDGE_INTS = [0, -1, 1, 2, 3, 7, 64, 2**31, 2**31 - 1, 2**63, -2**63, 10**30, -10**30]
_EDGE_FLOATS = [0.0, -0.0, 0.5, 1.0, 2.0, -3.5, 1e308, -1e308, 5e-324, math.nan, math.inf, -math.inf]

_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.sampled_from(_EDGE_INTS), st.integers(-8, 300),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(_EDGE_FLOATS),
    st.text(max_size=10), st.sampled_from(_WORDS),
)
json_values = st.recursive(
    _leaf,
    lambda kids: st.one_of(
        st.lists(kids, max_size=5),
        st.dictionaries(st.one_of(st.sampled_from(FIELDS + ["type", "rope_type", "factor", "quant_method",
                                                            "quant_algo", "kv_cache_quant_algo"]),
                                  st.text(max_size=6)), kids, max_size=4),
    ),
    max_leaves=10,
)
#: an edit: (where, field, delete?, value)
edits = st.lists(st.tuples(st.sampled_from(_NESTED), st.sampled_from(FIELDS), st.booleans(), json_values),
                 min_size=1, max_size=5)


def _apply(cfg: dict, changes) -> dict:
    for where, name, delete, value in changes:
        target = cfg if where == "top" else cfg.get(where)
        if not isinstance(target, dict):
            target = cfg
        if delete:
            target.pop(name, None)
        else:
            target[name] = value
    return cfg


def _good_value(name: str):
    kind, choices = ENGINE_ARGS[name].kind, ENGINE_ARGS[name].choices
    if name == "attention_backend":
        return st.sampled_from(list(ATTENTION_BACKENDS) + ["auto", "None", "", "flash_attn", "NOPE"])
    if kind == "int":
        return st.one_of(st.integers(-3, 4096), st.sampled_from([16, 64, 528, 1024, 2**20, 2**40, 2**63]))
    if kind == "bool":
        return st.booleans()
    if kind == "object":  # --hf-overrides: a JSON object or its text
        return st.sampled_from([{}, {"max_position_embeddings": 4096}, {"num_hidden_layers": None},
                                '{"max_position_embeddings": 8192}', "[1]", "{bad", {"text_config": {"x": 1}}])
    if choices is None:
        return st.text(max_size=8)
    return st.sampled_from(list(choices) + [c.upper() for c in choices] + ["", "auto "])


_ARG_NAMES = sorted(ENGINE_ARGS) + ["no_such_arg", "blocksize", "max_model_length", ""]


@functools.cache
def _arg_value(name: str):
    """The strategy of one argument's value, built once: hypothesis validates a strategy the
    first time it draws from it, and a strategy rebuilt for every draw is validated every
    time (most of this file's generation time, measured), for the same examples."""
    good = _good_value(name) if name in ENGINE_ARGS else st.integers()
    return st.one_of(good, good, json_values)


@functools.cache
def _arg_names(max_size: int):
    return st.lists(st.sampled_from(_ARG_NAMES), max_size=max_size, unique=True)


@st.composite
def engine_args(draw, max_size=4):
    names = draw(_arg_names(max_size))
    args = {}
    for name in names:
        args[name] = draw(_arg_value(name))
    return args


# -- the property ----------------------------------------------------------------------------

def _check_error(exc: EngineCfgError) -> None:
    # a StageError is a stage that crashed with a foreign exception: a bug, not an answer
    assert not isinstance(exc, StageError), exc
    assert exc.field is not None, f"{type(exc).__name__} names no field: {exc}"
    # an unknown engine argument named '' is the one field that is rightly empty
    assert exc.field or "''" in str(exc), f"{type(exc).__name__} names no field: {exc}"
    if isinstance(exc, InvalidInputError):
        # bad input names the field in the message itself
        assert exc.field.split(".")[-1] in str(exc), (exc.field, str(exc))


def resolve_or_name_the_field(config: dict, args: dict):
    """The property: a resolved, serialisable run, or an enginecfg error that names the field."""
    with _time_limit(_EXAMPLE_TIMEOUT_S):
        try:
            result = Pipeline(gpu_validation="off").run(EngineConfig.from_hf_config(config, **args))
        except EngineCfgError as exc:
            _check_error(exc)
            return exc
        doc = result.to_dict()
        json.dumps(doc, default=str)
    assert doc["status"] == "resolved" and doc["fingerprint"]
    return result


@_fuzz(150)
@given(name=st.sampled_from(BASE_NAMES), changes=edits)
def test_fuzzed_model_config(name, changes):
    resolve_or_name_the_field(_apply(copy.deepcopy(BASES[name]), changes), {})


@_fuzz(150)
@given(name=st.sampled_from(BASE_NAMES), args=engine_args())
def test_fuzzed_engine_args(name, args):
    resolve_or_name_the_field(copy.deepcopy(BASES[name]), args)


@_fuzz(150)
@given(name=st.sampled_from(BASE_NAMES), changes=edits, args=engine_args(max_size=3))
def test_fuzzed_config_and_engine_args(name, changes, args):
    resolve_or_name_the_field(_apply(copy.deepcopy(BASES[name]), changes), args)


_FILE_NAMES = ["qwen3.5-27b", "mamba-130m-hf", "gemma-4-26b-a4b", "nemotron-3-nano-30b-a3b-bf16"]
_RAW = {n: (CONFIGS / n / "config.json").read_bytes() for n in _FILE_NAMES}


@_fuzz(60)
@given(name=st.sampled_from(_FILE_NAMES), cut=st.floats(0, 1), junk=st.binary(max_size=8),
       where=st.floats(0, 1), args=engine_args(max_size=2))
def test_fuzzed_config_file_bytes(name, cut, junk, where, args):
    """Corrupted config.json bytes (truncated, junk spliced in): a run, or a named error."""
    raw = _RAW[name]
    raw = raw[:max(1, int(len(raw) * (1 - cut * cut)))] if cut > 0.5 else raw
    at = int(len(raw) * where)
    raw = raw[:at] + junk + raw[at:]
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "config.json").write_bytes(raw)
        with _time_limit(_EXAMPLE_TIMEOUT_S):
            try:
                Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(d, **args))
            except EngineCfgError as exc:
                _check_error(exc)


# -- nested sections, every JSON type ------------------------------------------------------------

#: every JSON type, as a value of a field inside a nested section
JSON_TYPES = [None, True, 7, -1, 2.5, "x", [], [1, "a"], {}, {"a": 1}]
_FIRST = object()  # the first key of a mapping (a per-layer entry)

#: (fixture, path into its config.json): the sections vLLM reads objects and per-layer lists
#: from (quantization, text, vision, rope), down to single entries of per-layer lists
NESTED_PATHS = [
    ("qwen3.6-27b-nvfp4", ("quantization_config",)),
    ("qwen3.6-27b-nvfp4", ("quantization_config", "quant_method")),
    ("qwen3.6-27b-nvfp4", ("quantization_config", "quant_algo")),
    ("qwen3.6-27b-nvfp4", ("quantization_config", "quantized_layers")),
    ("qwen3.6-27b-nvfp4", ("quantization_config", "quantized_layers", _FIRST)),
    ("qwen3.6-27b-nvfp4", ("quantization_config", "quantized_layers", _FIRST, "quant_algo")),
    ("qwen3.6-27b-nvfp4", ("quantization_config", "kv_cache_scheme")),
    ("qwen3.6-27b-nvfp4", ("quantization_config", "ignore")),
    ("qwen3.6-27b-nvfp4", ("quantization_config", "group_size")),
    ("qwen3.6-27b-nvfp4", ("text_config",)),
    ("qwen3.6-27b-nvfp4", ("text_config", "mamba_ssm_dtype")),
    ("qwen3.6-27b-nvfp4", ("text_config", "layer_types")),
    ("qwen3.6-27b-nvfp4", ("text_config", "layer_types", 0)),
    ("qwen3.6-27b-nvfp4", ("text_config", "rope_parameters")),
    ("qwen3.6-27b-nvfp4", ("text_config", "head_dim")),
    ("qwen3.6-27b-nvfp4", ("vision_config",)),
    ("qwen3.6-27b-nvfp4", ("vision_config", "depth")),
    ("gemma-4-26b-a4b-nvfp4", ("quantization_config", "quant_algo")),
    ("gemma-4-26b-a4b-nvfp4", ("quantization_config", "kv_cache_scheme")),
    ("gemma-4-26b-a4b", ("text_config", "rope_parameters")),
    ("gemma-4-26b-a4b", ("text_config", "rope_parameters", _FIRST)),
    ("gemma-4-26b-a4b", ("text_config", "layer_types", 0)),
    ("gemma-4-26b-a4b", ("vision_config",)),
    ("nemotron-3-nano-30b-a3b-nvfp4", ("hybrid_override_pattern",)),
    ("nemotron-3-nano-30b-a3b-nvfp4", ("mamba_ssm_cache_dtype",)),
    ("deepseek-v2-lite-like", ("rope_scaling",)),
    ("qwen3.6-27b-nvfp4", ("text_config", "rope_parameters", "rope_type")),
    ("qwen3.6-27b-nvfp4", ("text_config", "rope_parameters", "rope_theta")),
    ("gemma-4-26b-a4b", ("text_config", "rope_parameters", _FIRST, "rope_type")),
]
_NESTED_BASES = {n: json.loads((CONFIGS / n / "config.json").read_text())
                 for n in {b for b, _ in NESTED_PATHS}}


def _set_path(cfg: dict, path: tuple, value) -> dict:
    node = cfg
    for step in path[:-1]:
        node = node[next(iter(node)) if step is _FIRST else step]
    last = next(iter(node)) if path[-1] is _FIRST else path[-1]
    node[last] = copy.deepcopy(value)
    return cfg


def _path_id(base: str, path: tuple) -> str:
    return base + ":" + ".".join("<first>" if p is _FIRST else str(p) for p in path)


@pytest.mark.parametrize("base, path", NESTED_PATHS, ids=[_path_id(*bp) for bp in NESTED_PATHS])
def test_every_json_type_in_nested_sections(base, path):
    """Each nested field, per-layer entry included, holding each JSON type: a run, or an
    enginecfg error that names a field; never a crash."""
    seen = set()
    for value in JSON_TYPES:
        cfg = _set_path(copy.deepcopy(_NESTED_BASES[base]), path, value)
        out = resolve_or_name_the_field(cfg, {})
        seen.add(type(out).__name__)
    assert seen  # every value was run


@pytest.mark.parametrize("value", [{"a": 1}, 5, ["NVFP4"]])
def test_issue_reproduction_quant_algo_object_and_layers_list(value):
    """The fuzzing find: quant_algo not a string (and quantized_layers a list) ended in
    ``TypeError: unhashable type: 'dict'``; vLLM refuses the algorithm (its own message)."""
    cfg = copy.deepcopy(_NESTED_BASES["qwen3.6-27b-nvfp4"])
    cfg["quantization_config"]["quant_algo"] = value
    cfg["quantization_config"]["quantized_layers"] = ["model.layers.0.mlp"]
    with pytest.raises(EngineCfgError) as info:
        Pipeline(gpu_validation="off").run(EngineConfig.from_hf_config(cfg))
    assert str(info.value).startswith("ModelOpt currently only supports: ")
    assert info.value.field == "hf_config.quantization_config.quant_algo"


_CLI_NESTED = [
    (("quantization_config", "quant_algo"), {"a": 1}, 1),
    (("quantization_config", "quantized_layers"), ["model.layers.0.mlp"], 2),
    (("quantization_config", "quant_method"), 5, 2),
    (("quantization_config",), [1, 2], 2),
    (("text_config", "mamba_ssm_dtype"), 7, 2),
    # vLLM's own Qwen3.5 class lets transformers' layer-type check refuse it (a ValueError)
    (("text_config", "layer_types", 0), {"a": 1}, 1),
    (("vision_config",), 3, 2),
]


@pytest.mark.parametrize("path, value, code", _CLI_NESTED,
                         ids=[".".join(map(str, p)) for p, _, _ in _CLI_NESTED])
def test_cli_nested_type_errors_one_line_no_traceback(tmp_path, path, value, code):
    cfg = _set_path(copy.deepcopy(_NESTED_BASES["qwen3.6-27b-nvfp4"]), path, value)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    proc = _cli("run", str(tmp_path), "--no-audit", "--gpu-validation", "off")
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("enginecfg: "), proc.stderr
    if code == 2:  # bad input names the field; a refusal of vLLM's is vLLM's own text
        named = path[-1] if isinstance(path[-1], str) else path[-2]
        assert named in lines[0], lines[0]


# -- a failed run is recorded as failed ------------------------------------------------------

@pytest.fixture(scope="module")
def fuzz_store(module_db_url):
    """On both backends: each refuses texts of its own (PostgreSQL, NUL)."""
    from enginecfg.store import AuditStore

    store = AuditStore(module_db_url).attach()
    yield store
    store.close()


@_fuzz(30)
@given(name=st.sampled_from(BASE_NAMES), changes=edits, args=engine_args(max_size=2))
def test_fuzzed_runs_are_recorded_with_their_outcome(fuzz_store, name, changes, args):
    """Pins: resolve() publishes run_started + run_failed even when loading fails, and the
    store records the failure with its status and error."""
    cfg = _apply(copy.deepcopy(BASES[name]), changes)
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "config.json").write_text(json.dumps(cfg))
        before, failed_before = fuzz_store.recorded, fuzz_store.write_failed
        with _time_limit(_EXAMPLE_TIMEOUT_S):
            try:
                result = Pipeline(gpu_validation="off").resolve(d, **args)
            except EngineCfgError as exc:
                _check_error(exc)
                run_id, status, error = exc.run_id, exc.status, str(exc)
            else:
                run_id, status, error = result.run_id, "resolved", None
    # this example's write, not an earlier one's (the store keeps its last error): so that a
    # failure is pinned on the example that caused it, and hypothesis shrinks that one
    assert fuzz_store.write_failed == failed_before, fuzz_store.record_error
    assert fuzz_store.recorded == before + 1
    row = fuzz_store.get_run(run_id)
    assert row["status"] == status, row
    stored = row["error"]
    if error is None:
        assert stored is None, stored
    else:
        assert status in ("invalid", "rejected")
        assert isinstance(stored, dict) and stored["message"] == error, (stored, error)
        assert stored["field"] is not None


def test_a_fuzzed_invalid_run_is_in_the_store_as_invalid(fuzz_store, tmp_path):
    """A fixed example of the property above that is sure to be invalid (so the property
    cannot pass vacuously by drawing only resolved runs)."""
    cfg = copy.deepcopy(BASES["qwen3.5-27b"])
    cfg["text_config"]["max_position_embeddings"] = [float("nan")]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InvalidInputError) as info:
        Pipeline(gpu_validation="off").resolve(tmp_path, block_size=16)
    row = fuzz_store.get_run(info.value.run_id)
    assert row["status"] == "invalid"
    assert "max_position_embeddings" in json.dumps(row, default=str)


# -- regressions found by the fuzzer ---------------------------------------------------------

@pytest.mark.parametrize("where", ["top", "text_config"])
@pytest.mark.parametrize("value", [["qwen3_5"], {"a": 1}, 7, 1.5, True])
def test_regression_model_type_of_the_wrong_type_is_bad_input(where, value):
    """Found by the fuzzer: a list or dict model_type crashed with ``TypeError: unhashable``
    (set membership in the loader); it is bad input naming the field.  A scalar one at the top
    is a model type transformers does not know: refused as vLLM's AutoConfig refuses it
    (tests/typed_oracle has vLLM's own answers)."""
    cfg = copy.deepcopy(BASES["qwen3.5-27b"])
    (cfg if where == "top" else cfg["text_config"])["model_type"] = value
    exc = resolve_or_name_the_field(cfg, {})
    assert isinstance(exc, EngineCfgError)
    if where == "top" and not isinstance(value, (list, dict)):
        assert f"model type `{value}`" in str(exc)
    else:
        assert exc.field.endswith("model_type")


def _deep(depth: int):
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def _cyclic():
    cfg = copy.deepcopy(BASES["qwen3.5-27b"])
    cfg["text_config"]["self"] = cfg["text_config"]
    return cfg


@pytest.mark.parametrize("make", [
    _cyclic,
    lambda: dict(copy.deepcopy(BASES["mamba-130m-hf"]), extra=_deep(5000)),
    lambda: {**copy.deepcopy(BASES["mamba-130m-hf"]), (1, 2): "tuple key"},
], ids=["cycle", "nested 5000 deep", "tuple key"])
def test_regression_dict_that_is_not_json_is_bad_input(make):
    """Found while fuzzing: from_hf_config(dict) crashed with ValueError (a cycle),
    RecursionError (deep nesting) or TypeError (keys); it is bad input naming hf_config."""
    with _time_limit(_EXAMPLE_TIMEOUT_S), pytest.raises(InvalidInputError) as info:
        EngineConfig.from_hf_config(make())
    assert info.value.field == "hf_config"


def test_regression_dict_with_int_keys_reads_as_its_json():
    """The dict is read as its config.json would be: int keys (a transformers id2label) and
    Python objects (stringified, as the transformers worker sees them) still load."""
    cfg = copy.deepcopy(BASES["mamba-130m-hf"])
    cfg["id2label"] = {0: "A", 1: "B"}
    cfg["custom"] = {3, 4}
    a = Pipeline(gpu_validation="off").run(EngineConfig.from_hf_config(cfg)).to_dict()["config"]
    b = Pipeline(gpu_validation="off").run(EngineConfig.from_hf_config(json.loads(json.dumps(cfg, default=str))))
    assert a == b.to_dict()["config"]


def test_regression_deeply_nested_config_json_is_bad_input(tmp_path):
    """Found by the CLI test below: json.loads raised RecursionError (not a ValueError)."""
    (tmp_path / "config.json").write_bytes(MALFORMED["deep nesting"])
    with pytest.raises(InvalidInputError, match="nested too deeply") as info:
        EngineConfig.from_pretrained(tmp_path)
    assert info.value.field == "config.json"


# -- the CLI ---------------------------------------------------------------------------------

def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``enginecfg ARGS`` through the CLI's main in this process (``support.run_cli``); what
    only a real process shows is checked by ``test_cli_real_processes`` below."""
    return run_cli(*args, timeout=timeout)


def _one_line_exit_2(proc: subprocess.CompletedProcess, needle: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


MALFORMED = {
    "empty": b"",
    "truncated": b'{"architectures": ["LlamaForCausalLM"], "hidden_size": 4',
    "a list": b'[{"architectures": ["LlamaForCausalLM"]}]',
    "a number": b"4096",
    "null": b"null",
    "not utf-8": b'{"model_type": "\xff\xfe"}',
    "trailing comma": b'{"model_type": "llama",}',
    "bare NaN": b"NaN",
    "deep nesting": b"[" * 100_000 + b"]" * 100_000,
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_cli_malformed_config_json(tmp_path, name):
    (tmp_path / "config.json").write_bytes(MALFORMED[name])
    _one_line_exit_2(_cli("run", str(tmp_path), "--no-audit"), "config.json")


def test_cli_folder_without_config_json(tmp_path):
    _one_line_exit_2(_cli("run", str(tmp_path), "--no-audit"), "has no config.json")


def _unreadable(kind: str, tmp_path: Path) -> str:
    if kind == "directory named config.json":
        (tmp_path / "config.json").mkdir()
        return str(tmp_path)
    if kind == "fifo":
        os.mkfifo(tmp_path / "config.json")
        return str(tmp_path)
    if kind == "device":
        return "/dev/zero"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["directory named config.json", "fifo", "device"])
def test_cli_unreadable_config_exits_2_without_hanging(tmp_path, kind):
    """Pins the regular-file check in loading._read_bytes: a FIFO without a writer blocked the
    read forever and /dev/zero never ended (found by this test).  As root, chmod 000 does not
    stop reads, so these are the unreadable inputs."""
    path = _unreadable(kind, tmp_path)
    _one_line_exit_2(_cli("run", path, "--no-audit", timeout=60), "cannot read")


def test_python_unreadable_config_is_invalid_input(tmp_path):
    os.mkfifo(tmp_path / "config.json")
    with _time_limit(20), pytest.raises(InvalidInputError) as info:
        EngineConfig.from_pretrained(tmp_path)
    assert info.value.field == "model" and "not a regular file" in str(info.value)


@pytest.mark.parametrize("url", [
    "postgresql+psycopg://u:p@127.0.0.1:1/x",
    "sqlite:////proc/no/such/dir/audit.db",
    "sqlite:///{tmp}/missing-dir/file-not-dir/audit.db",
    "nosuchdriver://x/y",
    "not a url",
])
def test_cli_unreachable_database_exits_2_with_one_line(tmp_path, url):
    """The config resolves but its record cannot be written: exit 2 and one line (the run is
    not trusted unless recorded), never a traceback."""
    (tmp_path / "missing-dir").mkdir()
    (tmp_path / "missing-dir" / "file-not-dir").write_text("a file where a folder is needed")
    url = url.format(tmp=tmp_path)
    proc = _cli("run", str(CONFIGS / "qwen3.5-27b"), "--db", url, timeout=180)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "audit" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


# -- the same, in real processes -------------------------------------------------------------

#: one case of each kind above, run as real ``enginecfg`` processes: what only a process shows
#: (its exit status, nothing on stderr at interpreter exit, a read that blocks the process)
_REAL_CASES = {
    "malformed config.json": (2, "config.json"),
    "fifo": (2, "cannot read"),
    "nested type error": (2, "mamba_ssm_dtype"),
    "unreachable database": (2, "audit"),
}


def _start_real_cli(root: Path) -> dict[str, subprocess.Popen]:
    dirs = {name: root / str(i) for i, name in enumerate(_REAL_CASES)}
    for d in dirs.values():
        d.mkdir()
    (dirs["malformed config.json"] / "config.json").write_bytes(MALFORMED["truncated"])
    os.mkfifo(dirs["fifo"] / "config.json")
    nested = _set_path(copy.deepcopy(_NESTED_BASES["qwen3.6-27b-nvfp4"]), ("text_config", "mamba_ssm_dtype"), 7)
    (dirs["nested type error"] / "config.json").write_text(json.dumps(nested))
    hfcache.snapshot_for(nested)  # in this session's cache, as the resolving one's below
    argv = {
        "malformed config.json": ["run", str(dirs["malformed config.json"]), "--no-audit"],
        "fifo": ["run", str(dirs["fifo"]), "--no-audit"],
        "nested type error": ["run", str(dirs["nested type error"]), "--no-audit", "--gpu-validation", "off"],
        "unreachable database": ["run", str(CONFIGS / "qwen3.5-27b"), "--db", "sqlite:////proc/no/such/dir/audit.db"],
    }
    return {name: subprocess.Popen([sys.executable, "-P", "-m", "enginecfg", *args], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, cwd=os.environ["ENGINECFG_TEST_TMP"])
            for name, args in argv.items()}


@pytest.fixture(scope="module", autouse=True)
def _real_cli_started(request, tmp_path_factory, _transformers_in_process):
    """The processes of ``test_cli_real_processes``, started when this module starts (when
    those tests are selected): they run beside the in-process tests instead of after them.
    Those that read a config find its snapshot in this session's cache, built here."""
    if not any(getattr(item, "originalname", None) == "test_cli_real_processes"
               for item in request.session.items):
        yield {}
        return
    from enginecfg.pipeline.hf.cache import snapshot_for

    snapshot_for(json.loads((CONFIGS / "qwen3.5-27b" / "config.json").read_text()))
    procs = _start_real_cli(tmp_path_factory.mktemp("real-cli"))
    yield procs
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.fixture(scope="module")
def real_cli(_real_cli_started):
    """Every case of ``_REAL_CASES`` waited for: name -> CompletedProcess."""
    done = {}
    for name, proc in _real_cli_started.items():
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err += "\n(killed: no answer after 120 s)"
        done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return done


@pytest.mark.parametrize("name", list(_REAL_CASES))
def test_cli_real_processes(real_cli, name):
    code, needle = _REAL_CASES[name]
    proc = real_cli[name]
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("enginecfg: "), proc.stderr
    assert needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
