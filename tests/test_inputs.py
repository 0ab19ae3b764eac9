"""Bad input gets one clear line naming the field, and exit code 2; good odd input loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support import CONFIGS, FIXTURES
from enginecfg import ConfigRejectedError, EngineCfgError, EngineConfig, InvalidInputError, Pipeline

QWEN = str(CONFIGS / "qwen3.5-27b")


def cli(*args, cwd=None):
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-P", "-m", "enginecfg", *args], capture_output=True, text=True,
                          env=env, cwd=cwd or os.environ["ENGINECFG_TEST_TMP"], timeout=300)


@pytest.fixture()
def model_dir(tmp_path):
    def make(content: str | bytes | None, name="config.json"):
        d = tmp_path / "model"
        d.mkdir(exist_ok=True)
        if content is not None:
            (d / name).write_bytes(content if isinstance(content, bytes) else content.encode())
        return d
    return make


BAD_CLI = [
    (["--dtype", "float64"], "dtype"),
    (["--attention-backend", "NOT_A_BACKEND"], "attention_backend"),
    (["--block-size", "-16"], "block_size"),
    (["--block-size", "sixteen"], "--block-size"),
    (["--kv-cache-dtype", "float32"], "kv_cache_dtype"),
    (["--mamba-cache-mode", "some"], "mamba_cache_mode"),
    (["--mamba-ssm-cache-dtype", "bfloat16"], "mamba_ssm_cache_dtype"),
    (["-tp", "0"], "tensor_parallel_size"),
]


@pytest.mark.parametrize("flags,field", BAD_CLI, ids=[f[1] for f in BAD_CLI])
def test_bad_engine_flags_exit_2_with_one_line(flags, field, warm_snapshots):
    # warm: a config read for the first time adds its own note line (not the refusal's)
    proc = cli("run", QWEN, "--no-audit", *flags)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_malformed_json_missing_file_and_folder_without_config(model_dir, tmp_path):
    bad = model_dir('{"architectures": ["LlamaForCausalLM"], ')
    proc = cli("run", str(bad), "--no-audit")
    assert proc.returncode == 2 and "config.json" in proc.stderr and "not valid JSON" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = cli("run", str(tmp_path / "nowhere"), "--no-audit")
    assert proc.returncode == 2 and "model" in proc.stderr and "does not exist" in proc.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = cli("run", str(empty), "--no-audit")
    assert proc.returncode == 2 and "has no config.json" in proc.stderr


def test_a_string_where_a_number_belongs_in_the_model_config(model_dir):
    cfg = json.loads((CONFIGS / "qwen3.5-27b" / "config.json").read_text())
    cfg["text_config"]["max_position_embeddings"] = "lots"
    d = model_dir(json.dumps(cfg))
    with pytest.raises(InvalidInputError, match="max_position_embeddings") as info:
        EngineConfig.from_pretrained(d)
    assert info.value.field.endswith("max_position_embeddings")


@pytest.mark.parametrize("args,field", [
    ({"block_size": -1}, "block_size"), ({"block_size": "16"}, "block_size"),
    ({"block_size": True}, "block_size"), ({"dtype": "fp64"}, "dtype"),
    ({"attention_backend": "FLASH"}, "attention_backend"), ({"enable_prefix_caching": "yes"}, "enable_prefix_caching"),
    ({"tensor_parallel_size": 2.0}, "tensor_parallel_size"), ({"no_such_arg": 1}, "no_such_arg"),
])
def test_bad_engine_args_in_python(args, field):
    """Refused, naming the argument: what vLLM's model config refuses (and an unknown name)
    by ``from_pretrained``, what vLLM checks later by the run, at vLLM's step."""
    with pytest.raises(InvalidInputError) as info:
        Pipeline(gpu_validation="off").run(EngineConfig.from_pretrained(QWEN, **args))
    assert info.value.field == field and field in str(info.value)


def test_unknown_model_type_is_refused_as_vllm_refuses_it(model_dir):
    """vLLM 0.19.0 reads a config of a model type neither it nor transformers has a class for
    through transformers' AutoConfig, which refuses it (tests/typed_oracle: vLLM's answers)."""
    d = model_dir(json.dumps({"architectures": ["MyOwnForCausalLM"], "model_type": "my_own",
                              "hidden_size": 1024, "num_attention_heads": 8,
                              "max_position_embeddings": 4096}))
    with pytest.raises(ConfigRejectedError) as info:
        EngineConfig.from_pretrained(d)
    assert "model type `my_own`" in str(info.value)


def test_unknown_model_type_with_its_own_code_loads_as_generic_config(model_dir):
    """A config that names its own code (``auto_map``) is what vLLM loads with
    trust_remote_code; enginecfg never runs that code and reads the fields generically.  Its
    model class (``AutoModel...``) runs on vLLM's Transformers backend; a config whose code
    names no model class has none vLLM could run, and is refused as vLLM refuses it."""
    config = {"architectures": ["MyOwnForCausalLM"], "model_type": "my_own",
              "auto_map": {"AutoConfig": "configuration_my_own.MyOwnConfig",
                           "AutoModelForCausalLM": "modeling_my_own.MyOwnForCausalLM"},
              "hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 2,
              "max_position_embeddings": 4096, "torch_dtype": "float16", "custom_flag": 7}
    folder = model_dir(json.dumps(config))
    with pytest.raises(ConfigRejectedError, match="contains custom code which must be executed"):
        EngineConfig.from_pretrained(folder)  # vLLM: only with trust_remote_code
    cfg = EngineConfig.from_pretrained(folder, trust_remote_code=True)
    mc = cfg.model_config
    assert (mc.architecture, mc.head_size, mc.total_num_kv_heads, mc.max_model_len, mc.dtype) == \
        ("TransformersForCausalLM", 128, 2, 4096, "float16")
    assert mc.architectures == ["MyOwnForCausalLM"] and mc.arch_fallback.runs == "auto_map"
    assert mc.hf_config.custom_flag == 7 and not mc.is_hybrid
    del config["auto_map"]["AutoModelForCausalLM"]
    with pytest.raises(ConfigRejectedError, match=r"Model architectures \['MyOwnForCausalLM'\] are not supported"):
        EngineConfig.from_pretrained(model_dir(json.dumps(config)), trust_remote_code=True)


def test_remote_code_is_named_but_never_run(model_dir, tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "configuration_evil.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    (tmp_path / "model" / "modeling_evil.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    d = model_dir(json.dumps({"architectures": ["EvilForCausalLM"], "model_type": "evil",
                              "auto_map": {"AutoConfig": "configuration_evil.EvilConfig",
                                           "AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"},
                              "hidden_size": 512, "num_attention_heads": 8, "max_position_embeddings": 2048}))
    cfg = EngineConfig.from_pretrained(d, trust_remote_code=True)
    assert cfg.model_config.hf_config.auto_map["AutoConfig"] == "configuration_evil.EvilConfig"
    assert not marker.exists()


def test_infinity_token_loads():
    raw = (CONFIGS / "mamba-codestral-7b-v0.1" / "config.json").read_text()
    assert "Infinity" in raw
    cfg = EngineConfig.from_pretrained(CONFIGS / "mamba-codestral-7b-v0.1" / "config.json")
    assert cfg.model_config.hf_config.time_step_limit[1] == float("inf")


def test_dict_and_transformers_object_give_the_same_answer():
    raw = json.loads((CONFIGS / "nemotron-3-nano-30b-a3b-bf16" / "config.json").read_text())
    a = Pipeline(gpu_validation="off").run(EngineConfig.from_hf_config(raw)).to_dict()["config"]
    code = ("import json,sys; from transformers import AutoConfig; from enginecfg import EngineConfig, Pipeline;"
            f"c=AutoConfig.from_pretrained({str(CONFIGS / 'nemotron-3-nano-30b-a3b-bf16')!r});"
            "print(json.dumps(Pipeline(gpu_validation='off').run(EngineConfig.from_hf_config(c)).to_dict()['config']))")
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=os.environ["ENGINECFG_TEST_TMP"])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == a


def test_gemma4_per_layer_attributes_read_as_vllm_did():
    mc = EngineConfig.from_pretrained(CONFIGS / "gemma-4-26b-a4b").model_config
    assert (mc.hf_text_config.head_dim, mc.hf_text_config.global_head_dim) == (256, 512)
    assert (mc.head_size, mc.total_num_kv_heads) == (512, 8)


def test_transformers_refusal_is_vllms_answer():
    with pytest.raises(ConfigRejectedError, match="mamba_n_heads must divide") as info:
        EngineConfig.from_pretrained(CONFIGS / "falcon-h1-0.5b")
    assert info.value.vllm_type == "StrictDataclassClassValidationError"


def test_vllm_crash_cases_resolve_or_name_the_field():
    crashes = json.loads((FIXTURES / "vllm-crashes.json").read_text())
    assert crashes
    for case in crashes:
        try:
            Pipeline(gpu_validation="off").run(
                EngineConfig.from_pretrained(FIXTURES / case["config"], **case["engine_args"]))
        except EngineCfgError as exc:
            assert exc.field, case["name"]
            assert exc.field.split(".")[-1] in str(exc), (case["name"], str(exc))


def test_hf_overrides_are_applied_to_the_config_before_anything_is_derived():
    """``--hf-overrides`` (a JSON object, or a dict) replaces config fields before vLLM reads the
    config: the derived length, its refusal and the KV-cache figures follow; bad input is named."""
    from enginecfg.commands.serve import serve_command

    folder = CONFIGS / "jamba-1.5-mini"
    plain = Pipeline(gpu_validation="off").resolve(folder)
    for given in ({"max_position_embeddings": 4096}, '{"max_position_embeddings": 4096}'):
        result = Pipeline(gpu_validation="off").resolve(folder, hf_overrides=given)
        assert result.config.model_config.max_model_len == 4096
        assert result.config.engine_args["hf_overrides"] == given
    assert plain.config.model_config.max_model_len == 262144
    assert result.facts["impact"].kv_tokens != plain.facts["impact"].kv_tokens or \
        result.facts["impact"].max_concurrency != plain.facts["impact"].max_concurrency
    assert "--hf-overrides" in serve_command(result)
    with pytest.raises(EngineCfgError, match=r"derived max_model_len \(max_position_embeddings=4096"):
        Pipeline(gpu_validation="off").resolve(folder, hf_overrides={"max_position_embeddings": 4096},
                                               max_model_len=8192)
    with pytest.raises(InvalidInputError, match=r"invalid hf_overrides \(--hf-overrides\): got '\[1\]'"):
        Pipeline(gpu_validation="off").resolve(folder, hf_overrides="[1]")


def test_a_refused_value_that_hf_overrides_set_is_blamed_on_the_flag():
    """The value came from --hf-overrides, not from config.json: the refusal says so, and a
    length derived from it is not blamed on a --max-model-len nobody gave."""
    folder = CONFIGS / "jamba-1.5-mini"
    pipe = Pipeline(gpu_validation="off")
    with pytest.raises(InvalidInputError) as info:
        pipe.resolve(folder, hf_overrides={"num_attention_heads": "x"})
    assert "in config.json" not in str(info.value)
    assert "(the value --hf-overrides sets: num_attention_heads='x')" in str(info.value)
    with pytest.raises(InvalidInputError) as info:
        pipe.resolve(folder, hf_overrides={"num_attention_heads": 0})
    assert info.value.field == "hf_config.num_attention_heads" and "--hf-overrides sets" in str(info.value)
    with pytest.raises(InvalidInputError) as info:
        pipe.resolve(folder, hf_overrides={"max_position_embeddings": -5})
    assert "--max-model-len" not in str(info.value)
    assert "invalid max_model_len (derived from the model config as --hf-overrides sets it): got -5" \
        in str(info.value)
    with pytest.raises(InvalidInputError, match=r"invalid max_model_len \(--max-model-len\): got 0"):
        pipe.resolve(folder, max_model_len=0)
