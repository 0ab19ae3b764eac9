"""An architecture vLLM does not register never resolves silently.

vLLM looks ``architectures`` up in its model registry (its own names, or a name whose task
suffix it swaps for one it registers).  With none registered it runs the first name on its
Transformers backend when transformers has a class of that name the backend can run (0.34.0:
also a class using the attention interface), or when the config names its own model class
(``auto_map``); otherwise it refuses the architecture, in words of its own for a name it dropped.
The registries are generated from each release's source (``tools/dump_vllm_registry.py``), the
transformers classes from transformers itself (``tools/dump_transformers_classes.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import attrs
import pytest

from support import EXAMPLES, REPO

from enginecfg import ConfigRejectedError, EngineConfig, Pipeline
from enginecfg.commands import explain
from enginecfg.pipeline.models import vllm_registry
from enginecfg.pipeline.models.v034 import config_time as v034

QWEN = EXAMPLES / "qwen3.5-27b"
LLAMA = {"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 4,
         "num_hidden_layers": 4, "intermediate_size": 5632, "max_position_embeddings": 4096, "vocab_size": 32000,
         "torch_dtype": "bfloat16"}


def renamed(tmp_path, name: str, base: dict | None = None):
    config = dict(base) if base is not None else json.loads((QWEN / "config.json").read_text())
    config["architectures"] = [name]
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("release", ["0.19.0", "0.34.0"])
def test_a_name_no_one_has_is_refused_as_vllm_refuses_it(release, tmp_path, warm_snapshots):
    folder = renamed(tmp_path, "FooForCausalLM")
    with pytest.raises(ConfigRejectedError) as info:
        Pipeline(vllm_version=release, gpu_validation="off").resolve(folder)
    err = info.value
    assert str(err).startswith("Model architectures ['FooForCausalLM'] are not supported for now. "
                               "Supported architectures: dict_keys([...])")
    assert f"names vLLM {release} registers" in str(err)
    assert err.field == "hf_config.architectures" and err.vllm_type == "ValueError"


def test_the_command_line_says_so_and_records_a_rejected_run(tmp_path, warm_snapshots):
    folder = renamed(tmp_path, "FooForCausalLM")
    env = dict(os.environ, ENGINECFG_PLUGINS="none", ENGINECFG_DB=f"sqlite:///{tmp_path / 'a.db'}")
    proc = subprocess.run([sys.executable, "-P", "-m", "enginecfg", "run", str(folder), "--gpu-validation", "off"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 1
    assert "rejected: Model architectures ['FooForCausalLM'] are not supported for now" in proc.stderr
    runs = subprocess.run([sys.executable, "-P", "-m", "enginecfg", "runs", "--json"], capture_output=True,
                          text=True, timeout=300, env=env, cwd=tmp_path)
    assert [r["status"] for r in json.loads(runs.stdout)] == ["rejected"]


def test_a_transformers_class_runs_on_the_transformers_backend_and_says_so(tmp_path, warm_snapshots):
    folder = renamed(tmp_path, "LlamaForQuestionAnswering", LLAMA)
    result = Pipeline(gpu_validation="off").resolve(folder)
    mc = result.config.model_config
    assert mc.architecture == "TransformersForCausalLM" and list(mc.architectures) == ["LlamaForQuestionAnswering"]
    assert not mc.is_hybrid
    e = explain(folder)
    found = {f.id: f for f in e.findings}["transformers-backend"]
    assert found.message == ("LlamaForQuestionAnswering is not in vLLM 0.19.0's model registry: vLLM runs "
                             "transformers' LlamaForQuestionAnswering class on its Transformers backend "
                             "(TransformersForCausalLM), as a plain attention model.")


def test_the_run_report_says_which_fallback(tmp_path, warm_snapshots):
    folder = renamed(tmp_path, "LlamaForQuestionAnswering", LLAMA)
    env = dict(os.environ, ENGINECFG_PLUGINS="none", COLUMNS="200")
    proc = subprocess.run([sys.executable, "-P", "-m", "enginecfg", "run", str(folder), "--no-audit",
                           "--gpu-validation", "off"], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[2].startswith(
        "Architecture: LlamaForQuestionAnswering is not in vLLM 0.19.0's model registry")


def test_a_class_the_backend_cannot_run_is_refused(tmp_path, warm_snapshots):
    # transformers has it, but says its attention does not go through the interface vLLM drives
    from enginecfg.pipeline.models.transformers_classes import MODEL_CLASSES

    assert MODEL_CLASSES["BambaForCausalLM"] == (False, True)
    hf = SimpleNamespace(num_experts=0)
    reg = vllm_registry.Registry("0.19.0", (), {}, {})
    with pytest.raises(ConfigRejectedError, match="not supported for now"):
        reg.resolve(["BambaForCausalLM"], hf, hf)
    # vLLM 0.34.0's backend also runs a class that uses the attention interface (RULES.md C1)
    reg = vllm_registry.Registry("0.34.0", (), {}, {}, attention_interface=True)
    fallback = reg.resolve(["BambaForCausalLM"], hf, hf)
    assert (fallback.backend_class, fallback.runs) == ("TransformersForCausalLM", "transformers")
    moe = SimpleNamespace(num_local_experts=8)
    assert reg.resolve(["MixtralForCausalLM"], moe, moe) is not None
    assert reg.resolve(["MixtralForCausalLM"], moe, moe).backend_class == "TransformersMoEForCausalLM"


def test_a_dropped_name_is_refused_in_vllms_own_words(tmp_path, warm_snapshots):
    folder = renamed(tmp_path, "QWenLMHeadModel", LLAMA)
    assert Pipeline(gpu_validation="off").resolve(folder).status == "resolved"  # 0.19.0 registers it
    with pytest.raises(ConfigRejectedError) as info:
        Pipeline(vllm_version="0.34.0", gpu_validation="off").resolve(folder)
    assert str(info.value) == ("Model architecture QWenLMHeadModel was supported in vLLM until v0.23.0, and is "
                               "not supported anymore. Please use an older version of vLLM if you want to use "
                               "this model architecture.")


def test_registered_names_and_suffix_swaps_are_vllms_own_classes():
    reg = vllm_registry.REGISTRY
    assert reg.registers("Qwen3_5ForConditionalGeneration") and reg.registers("LlamaForCausalLM")
    assert reg.registers("Qwen3NextForSequenceClassification")  # -> Qwen3NextForCausalLM
    assert not reg.registers("FooForCausalLM") and not reg.registers("LlamaForQuestionAnswering")
    assert reg.registers("BambaForCausalLM") and not v034.REGISTRY.registers("BambaForCausalLM")
    assert v034.REGISTRY.previously["BambaForCausalLM"] == "0.23.0"


def test_the_registry_tool_reads_a_releases_tables(tmp_path):
    source = tmp_path / "0.99.0" / "vllm" / "model_executor" / "models" / "registry.py"
    source.parent.mkdir(parents=True)
    source.write_text(
        "import os\n_TEXT_GENERATION_MODELS = {'AForCausalLM': ('a', 'A'), 'BForCausalLM': ('b', 'B')}\n"
        "_EMBEDDING_MODELS = {'AModel': ('a', 'A'), **{k: v for k, v in _TEXT_GENERATION_MODELS.items() if v[0] == 'b'}}\n"
        "_VLLM_MODELS = {**_TEXT_GENERATION_MODELS, **_EMBEDDING_MODELS}\n"
        "_PREVIOUSLY_SUPPORTED_MODELS = {'OldForCausalLM': '0.1.0'}\n_OOT_SUPPORTED_MODELS = {}\n"
        "def f():\n    raise SystemExit\n")
    out = tmp_path / "gen.py"
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "dump_vllm_registry.py"), str(source), str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    scope: dict = {}
    exec(out.read_text(), scope)  # noqa: S102 - the generated data module
    assert scope["VLLM_VERSION"] == "0.99.0"
    assert scope["SUPPORTED"] == ("AForCausalLM", "BForCausalLM", "AModel")
    assert scope["PREVIOUSLY_SUPPORTED"] == {"OldForCausalLM": "0.1.0"} and scope["OOT_SUPPORTED"] == {}


def test_the_registry_tool_writes_a_later_release_as_its_change(tmp_path):
    """``--on`` keeps only what the release changed; the registry put together again is the
    release's own: its order, and the entries it set and dropped."""
    from enginecfg.pipeline.models.vllm_registry import Registry

    source = tmp_path / "0.99.1" / "vllm" / "model_executor" / "models" / "registry.py"
    source.parent.mkdir(parents=True)
    source.write_text("_VLLM_MODELS = {'AForCausalLM': 1, 'NewForCausalLM': 1, 'CForCausalLM': 1, 'BForCausalLM': 1}\n"
                      "_PREVIOUSLY_SUPPORTED_MODELS = {'OldForCausalLM': '0.1.0', 'DForCausalLM': '0.99.0'}\n"
                      "_OOT_SUPPORTED_MODELS = {}\n")
    base = tmp_path / "base.py"
    base.write_text("VLLM_VERSION = '0.99.0'\nSUPPORTED = ('AForCausalLM', 'BForCausalLM', 'CForCausalLM', "
                    "'DForCausalLM')\nPREVIOUSLY_SUPPORTED = {'OldForCausalLM': '0.1.0'}\n"
                    "OOT_SUPPORTED = {'EForCausalLM': 'https://example.org/e'}\n")
    out = tmp_path / "change.py"
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "dump_vllm_registry.py"), str(source), str(out),
                           "--on", str(base)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    change = type(sys)("change")
    exec(out.read_text(), change.__dict__)  # noqa: S102 - the generated data module
    assert change.ON == "0.99.0" and change.PREVIOUSLY_SUPPORTED_SET == {"DForCausalLM": "0.99.0"}
    assert change.OOT_SUPPORTED_DROPPED == ("EForCausalLM",)
    scope: dict = {}
    exec(base.read_text(), scope)  # noqa: S102
    before = Registry("0.99.0", scope["SUPPORTED"], scope["PREVIOUSLY_SUPPORTED"], scope["OOT_SUPPORTED"])
    after = before.changed(change)
    assert after.release == "0.99.1"
    assert after.supported == ("AForCausalLM", "NewForCausalLM", "CForCausalLM", "BForCausalLM")
    assert dict(after.previously) == {"OldForCausalLM": "0.1.0", "DForCausalLM": "0.99.0"} and dict(after.oot) == {}
    with pytest.raises(ValueError, match="0.99.0's registry, not 0.98.0's"):
        attrs.evolve(before, release="0.98.0").changed(change)


#: sha256 of 0.34.0's registry as its whole generated table held it (names in order, then the
#: two tables' entries sorted), before it was kept as a change on 0.19.0's
REGISTRY_034_SHA256 = "aa57db098c7449b0707029a4640addf54afa9ed6d5df20317ebe4a69e38f0eb0"


def test_034s_registry_put_together_is_its_whole_table():
    import hashlib

    r = v034.REGISTRY
    text = json.dumps([list(r.supported), sorted(r.previously.items()), sorted(r.oot.items())])
    assert hashlib.sha256(text.encode()).hexdigest() == REGISTRY_034_SHA256
    assert r.release == "0.34.0" and len(r.supported) == 426


def test_the_generated_tables_are_the_releases():
    from enginecfg.pipeline.models import transformers_classes, vllm_registry_019
    from enginecfg.pipeline.models.v034 import vllm_registry_034

    assert vllm_registry_019.VLLM_VERSION == "0.19.0" and vllm_registry_034.VLLM_VERSION == "0.34.0"
    assert transformers_classes.TRANSFORMERS_VERSION == "5.23.0"
    # every architecture enginecfg's table knows is registered by 0.19.0 (its MTP row is keyed
    # by the class, which vLLM registers as NemotronHMTPModel)
    from enginecfg.pipeline.models.architectures import ARCHITECTURES

    assert [n for n in ARCHITECTURES if not vllm_registry.REGISTRY.registers(n)] == ["NemotronHMTP"]
    assert vllm_registry.REGISTRY.registers("NemotronHMTPModel")
