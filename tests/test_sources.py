"""Model sources: local folders, a hub cache laid out as huggingface_hub writes it, a local
HTTP hub; the safetensors header reader; provenance.  No network anywhere."""

from __future__ import annotations

import hashlib
import json
import struct

import pytest

from hubsupport import LocalHub, safetensors_bytes, write_cache_repo

from enginecfg.pipeline.errors import InvalidInputError
from enginecfg.pipeline.hf.safetensors_header import read_header
from enginecfg.pipeline.hf.sources import hub_cache_dir, is_repo_id, open_source
from enginecfg.pipeline.models.weights_dtype import common_dtype, dtype_from_headers

CONFIG = json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
                     "num_attention_heads": 4, "num_hidden_layers": 2}).encode()


@pytest.fixture
def hub_env(tmp_path, monkeypatch):
    """An empty hub cache under HF_HOME, offline, no token, no stray endpoint."""
    home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_ENDPOINT", "HF_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    return home / "hub"


# -- safetensors headers ---------------------------------------------------------------------

def test_header_reader_reads_only_the_header(tmp_path):
    data = safetensors_bytes({"a": ("BF16", [1024, 1024]), "b": ("F32", [4])}, {"format": "pt"})
    f = tmp_path / "model.safetensors"
    f.write_bytes(data)
    got = read_header(f)
    (n,) = struct.unpack("<Q", data[:8])
    assert got.bytes_read == 8 + n < len(data) // 100        # 2 MiB of tensors were not read
    assert got.header["a"]["dtype"] == "BF16" and got.header["__metadata__"] == {"format": "pt"}
    assert got.sha256 == hashlib.sha256(data[:8 + n]).hexdigest()


@pytest.mark.parametrize("data, why", [
    (b"\x01\x02", "only 2 bytes long"),
    (struct.pack("<Q", 10 ** 12) + b"{}", "does not fit"),
    (struct.pack("<Q", 4) + b"[1] ", "JSON list"),
    (struct.pack("<Q", 4) + b"{no ", "not JSON"),
])
def test_header_reader_refuses_what_is_not_safetensors(tmp_path, data, why):
    f = tmp_path / "bad.safetensors"
    f.write_bytes(data)
    with pytest.raises(InvalidInputError, match=why) as e:
        read_header(f)
    assert "bad.safetensors" in str(e.value) and "\n" not in str(e.value)


def test_common_dtype_follows_lossless_casts():
    assert common_dtype({"bfloat16", "float32"}) == "float32"     # bf16 weights + f32 A_log
    assert common_dtype({"bfloat16"}) == "bfloat16"
    assert common_dtype({"int8", "float16"}) == "float16"          # ints cast up to floats
    assert common_dtype({"float8_e4m3fn", "bfloat16", "float32"}) == "float32"
    assert common_dtype({"bool", "uint8", "int8"}) in ("int8", "uint8")   # neither holds the other
    assert common_dtype({"uint8", "int16"}) == "int16"
    headers = {"a.safetensors": {"__metadata__": {"format": "pt"}, "w": {"dtype": "F16"}},
               "b.safetensors": {"x": {"dtype": "NOPE"}, "y": {"dtype": "I8"}}}
    assert dtype_from_headers(headers) == "float16"
    assert dtype_from_headers({"a": {"__metadata__": {"format": "pt"}}}) is None


# -- local folders ---------------------------------------------------------------------------

def test_local_folder_reads_small_files_and_headers_with_hashes(tmp_path):
    (tmp_path / "config.json").write_bytes(CONFIG)
    (tmp_path / "tokenizer_config.json").write_text('{"model_max_length": 512}')
    st = safetensors_bytes({"w": ("F16", [8, 8])})
    (tmp_path / "model-00001-of-00001.safetensors").write_bytes(st)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "nested.safetensors").write_bytes(safetensors_bytes({"z": ("F64", [1])}))
    src = open_source(str(tmp_path))
    assert src.kind == "folder" and src.config_bytes() == CONFIG
    assert src.read_json("tokenizer_config.json") == {"model_max_length": 512}
    assert src.read_json("generation_config.json") is None
    headers = src.safetensors_headers()
    assert list(headers) == ["model-00001-of-00001.safetensors"]   # top level only, as vLLM globs
    prov = src.provenance()
    files = {f["name"]: f for f in prov["files"]}
    assert set(files) == {"config.json", "tokenizer_config.json", "model-00001-of-00001.safetensors"}
    assert files["config.json"]["sha256"] == hashlib.sha256(CONFIG).hexdigest()
    assert files["model-00001-of-00001.safetensors"]["how"] == "header"
    assert files["model-00001-of-00001.safetensors"]["size"] < len(st)
    assert prov["kind"] == "folder" and "repo_id" not in prov and prov["path"] == str(tmp_path.resolve())


def test_lone_config_file_reads_nothing_beside_it(tmp_path):
    (tmp_path / "config.json").write_bytes(CONFIG)
    (tmp_path / "tokenizer_config.json").write_text('{"model_max_length": 512}')
    (tmp_path / "model.safetensors").write_bytes(safetensors_bytes({"w": ("F16", [2])}))
    src = open_source(str(tmp_path / "config.json"))
    assert src.kind == "file" and src.config_bytes() == CONFIG
    assert src.read_json("tokenizer_config.json") is None and src.safetensors_headers() == {}


def test_bad_json_beside_config_names_the_file(tmp_path):
    (tmp_path / "config.json").write_bytes(CONFIG)
    (tmp_path / "tokenizer_config.json").write_text('{"model_max_length": ')
    with pytest.raises(InvalidInputError, match=r"invalid tokenizer_config\.json: .* is not valid JSON"):
        open_source(str(tmp_path)).read_json("tokenizer_config.json")


@pytest.mark.parametrize("text, ok", [
    ("Qwen/Qwen3.5-27B", True), ("org/name", True), ("a/b.c_d-e", True), ("gpt2", True),
    ("org/na--me", False), ("org/../x", False), ("/abs/path", False), ("a/b/c", False), ("org/-x", False),
])
def test_repo_id_shapes(text, ok):
    assert is_repo_id(text) is ok


def test_missing_path_that_is_no_repo_id_is_bad_input(tmp_path):
    with pytest.raises(InvalidInputError, match="does not exist") as e:
        open_source(str(tmp_path / "nope" / "x" / "y"))
    assert e.value.field == "model"


def test_revision_with_a_local_path_is_refused(tmp_path):
    (tmp_path / "config.json").write_bytes(CONFIG)
    with pytest.raises(InvalidInputError, match=r"revision .* only with a Hugging Face repo id"):
        open_source(str(tmp_path), revision="main")


# -- hub cache, offline ----------------------------------------------------------------------

def test_offline_repo_id_resolves_from_the_cache(hub_env):
    st = safetensors_bytes({"w": ("BF16", [4, 4]), "A_log": ("F32", [4])})
    commit = write_cache_repo(hub_env, "org/name", {"config.json": CONFIG, "model.safetensors": st,
                                                    "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}'})
    assert hub_cache_dir() == hub_env
    src = open_source("org/name")
    assert (src.kind, src.repo_id, src.commit, src.offline) == ("hub", "org/name", commit, True)
    assert src.model == "org/name" and src.config_bytes() == CONFIG
    assert src.read_json("1_Pooling/config.json") == {"pooling_mode_mean_tokens": True}
    assert dtype_from_headers(src.safetensors_headers()) == "float32"
    prov = src.provenance()
    assert prov["repo_id"] == "org/name" and prov["commit"] == commit and prov["revision"] is None
    assert {f["name"] for f in prov["files"]} == {"config.json", "model.safetensors", "1_Pooling/config.json"}


def test_offline_revision_by_tag_and_by_commit(hub_env):
    old = write_cache_repo(hub_env, "org/name", {"config.json": b'{"v": 1}'}, refs=("v1",))
    new = write_cache_repo(hub_env, "org/name", {"config.json": CONFIG}, refs=("main",))
    assert open_source("org/name").commit == new
    tagged = open_source("org/name", revision="v1")
    assert tagged.commit == old and tagged.config_bytes() == b'{"v": 1}'
    assert open_source("org/name", revision=old).config_bytes() == b'{"v": 1}'


def test_offline_unknown_repo_names_repo_and_setting(hub_env):
    with pytest.raises(InvalidInputError) as e:
        open_source("org/absent")
    msg = str(e.value)
    assert "'org/absent'" in msg and "HF_HUB_OFFLINE" in msg and str(hub_env) in msg and "\n" not in msg
    assert e.value.field == "model"


def test_offline_missing_revision_names_it(hub_env):
    write_cache_repo(hub_env, "org/name", {"config.json": CONFIG})
    with pytest.raises(InvalidInputError, match=r"'v9' of Hugging Face repo 'org/name' is not in the local "
                                                r"cache .* HF_HUB_OFFLINE") as e:
        open_source("org/name", revision="v9")
    assert e.value.field == "revision"


def test_offline_cached_repo_without_config(hub_env):
    write_cache_repo(hub_env, "org/name", {"README.md": b"hi"})
    with pytest.raises(InvalidInputError, match=r"repo 'org/name' has no config\.json in the local cache"):
        open_source("org/name").config_bytes()


def test_hf_hub_cache_overrides_hf_home(hub_env, tmp_path, monkeypatch):
    other = tmp_path / "elsewhere"
    write_cache_repo(other, "org/name", {"config.json": CONFIG})
    with pytest.raises(InvalidInputError):
        open_source("org/name")
    monkeypatch.setenv("HF_HUB_CACHE", str(other))
    assert open_source("org/name").config_bytes() == CONFIG


# -- a local HTTP hub, online ----------------------------------------------------------------

def _online(monkeypatch, url):
    """A process started online: huggingface_hub read HF_HUB_OFFLINE once, at its import."""
    import huggingface_hub.constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", url)


def test_online_fetches_small_files_into_the_cache_and_headers_by_range(hub_env, monkeypatch):
    import huggingface_hub.constants

    commit = "c" * 40
    weights = safetensors_bytes({"w": ("F16", [256, 256]), "b": ("F16", [256])})
    index = json.dumps({"weight_map": {"w": "model-1.safetensors", "b": "model-1.safetensors"}}).encode()
    repo = {"commit": commit, "files": {"config.json": CONFIG, "model.safetensors.index.json": index,
                                        "model-1.safetensors": weights,
                                        "tokenizer_config.json": b'{"model_max_length": 64}'}}
    with LocalHub({"org/name": repo}) as hub:
        _online(monkeypatch, hub.url)
        src = open_source("org/name")
        assert (src.commit, src.offline, src.root) == (commit, False, None)
        assert src.read_json("tokenizer_config.json") == {"model_max_length": 64}
        assert src.read_json("generation_config.json") is None
        headers = src.safetensors_headers()
        assert dtype_from_headers(headers) == "float16"
        # weights: only ranged GETs, never the whole file
        ranges = hub.bytes_sent_for("model-1.safetensors")
        assert ranges and all(r is not None and r.startswith("bytes=") for r in ranges)
        assert {f["name"]: f["how"] for f in src.provenance()["files"]}["model-1.safetensors"] == "remote-header"
    # the small files are now in the standard cache: offline finds them, with no hub at all
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    again = open_source("org/name")
    assert again.commit == commit and again.config_bytes() == CONFIG
    assert again.read_json("tokenizer_config.json") == {"model_max_length": 64}
    assert not (hub_env / "models--org--name" / "snapshots" / commit / "model-1.safetensors").exists()


def test_online_unknown_repo_and_revision(hub_env, monkeypatch):
    with LocalHub({"org/name": {"commit": "d" * 40, "files": {"config.json": CONFIG}}}) as hub:
        _online(monkeypatch, hub.url)
        with pytest.raises(InvalidInputError, match=r"repo 'org/other' does not exist .*HF_TOKEN") as e:
            open_source("org/other")
        assert e.value.field == "model"
        with pytest.raises(InvalidInputError, match=r"'nope' is not a branch, tag or commit of Hugging Face "
                                                    r"repo 'org/name'") as e:
            open_source("org/name", revision="nope")
        assert e.value.field == "revision"


def test_online_without_network_and_without_cache(hub_env, monkeypatch):
    import socket

    with socket.socket() as s:       # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _online(monkeypatch, f"http://127.0.0.1:{port}")
    with pytest.raises(InvalidInputError) as e:
        open_source("org/name")
    msg = str(e.value)
    assert "cannot reach the Hugging Face Hub" in msg and "for 'org/name'" in msg and "HF_HUB_OFFLINE=1" in msg
    assert "\n" not in msg and e.value.field == "model"


# -- sentence-transformers settings ----------------------------------------------------------

class _Files:
    """A source made of a dict: name -> parsed JSON."""

    def __init__(self, files):
        self.files = files

    def read_json(self, name):
        return self.files.get(name)

    def listed(self, name):
        return name in self.files


@pytest.mark.parametrize("key, name", [
    ("pooling_mode_cls_token", "CLS"), ("pooling_mode_mean_tokens", "MEAN"), ("pooling_mode_lasttoken", "LAST"),
    ("pooling_mode_mean_sqrt_len_tokens", "MEAN"), ("pooling_mode_max_tokens", "MAX"),
    ("pooling_mode_weightedmean_tokens", "WEIGHTEDMEAN"), ("include_prompt", "INCLUDE"),
])
def test_pooling_mode_keys_read_as_vllm_names_them(key, name):
    from enginecfg.pipeline.models.model_files import pooling_type_name

    assert pooling_type_name(key) == name


def test_sentence_transformers_pooling_settings():
    from enginecfg.pipeline.models.model_files import sentence_transformers_pooling

    modules = [{"type": "sentence_transformers.models.Transformer", "path": ""},
               {"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"},
               {"type": "sentence_transformers.models.Normalize", "path": "2_Normalize"}]
    pool = {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": True,
            "include_prompt": True}
    got = sentence_transformers_pooling(_Files({"modules.json": modules, "1_Pooling/config.json": pool}))
    assert got == {"use_activation": True, "seq_pooling_type": "CLS"}        # MAX / INCLUDE are not vLLM types
    # the last True key wins, as vLLM walks the file in order
    pool2 = {"pooling_mode_cls_token": True, "pooling_mode_lasttoken": True}
    got = sentence_transformers_pooling(_Files({"modules.json": modules[:2], "1_Pooling/config.json": pool2}))
    assert got == {"use_activation": False, "seq_pooling_type": "LAST"}
    # no Pooling module: not a sentence-transformers pooling model
    assert sentence_transformers_pooling(_Files({"modules.json": modules[:1]})) is None
    with pytest.raises(InvalidInputError, match="modules.json"):
        sentence_transformers_pooling(_Files({"modules.json": {"not": "a list"}}))


def test_online_never_downloads_anything_but_settings_files(hub_env, monkeypatch):
    repo = {"commit": "f" * 40, "files": {"config.json": CONFIG,
                                          "model.safetensors": safetensors_bytes({"w": ("F16", [64])})}}
    with LocalHub({"org/name": repo}) as hub:
        _online(monkeypatch, hub.url)
        src = open_source("org/name")
        with pytest.raises(ValueError, match="not a settings file"):
            src.read_bytes("model.safetensors")
        assert hub.bytes_sent_for("model.safetensors") == []


def test_online_sends_hf_token(hub_env, monkeypatch):
    monkeypatch.delenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", raising=False)
    monkeypatch.setenv("HF_TOKEN", "hf_testtoken123")
    with LocalHub({"org/private": {"commit": "a" * 40, "files": {"config.json": CONFIG}}}) as hub:
        _online(monkeypatch, hub.url)
        assert open_source("org/private").config_bytes() == CONFIG
    assert hub.authorizations and set(hub.authorizations) == {"Bearer hf_testtoken123"}


def test_real_path_names_what_os_path_realpath_names(tmp_path, monkeypatch):
    """The provenance's path: the kernel's name of the opened folder is the name
    ``os.path.realpath`` gives, through symlinks (absolute and relative), ``..``, a trailing
    slash and a relative path from the working folder; a path that does not exist is
    ``realpath``'s own answer."""
    import os

    from enginecfg.pipeline.hf.sources import real_path

    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "config.json").write_text("{}")
    (tmp_path / "link").symlink_to(tmp_path / "a")
    (tmp_path / "rel").symlink_to("a/b")
    monkeypatch.chdir(tmp_path)
    for given in (str(tmp_path / "link" / "b"), "link/b", "rel", "a/../a/b", "link/../a/b/", "rel/config.json",
                  tmp_path / "rel", "missing/folder"):
        assert real_path(given) == os.path.realpath(given), given
    assert real_path("rel") == str(tmp_path.resolve() / "a" / "b")
