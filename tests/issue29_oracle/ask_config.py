#!/usr/bin/env python3
"""Ask the real vLLM 0.19.0 what it makes of each case at config time.

Run with the oracle venv's python (``cases.py config`` / ``cases.py hub`` do it)::

    $REF/venv19/bin/python tests/issue29_oracle/ask_config.py CASES.json -o OUT.json \
        --extra-path $REF/tf523-overlay [--hub]

Per case, ``EngineArgs(model=..., skip_tokenizer_init=True, **args).create_engine_config()``
(usage context ``OPENAI_API_SERVER``, as ``vllm serve``) on the 0.19 oracle's emulated H200
(``../shared/oracle``: vLLM's CUDA platform with only the device queries answered). Nothing in
vLLM is changed; observed only:

- the stage an exception left from (wrappers around ModelConfig's and VllmConfig's verify
  hooks, as ``run_oracle.py``), and the exception at the root;
- every ``vllm.*`` log record of the case (``Logger.handle`` is wrapped; vLLM's ``*_once``
  caches are cleared before each case, so each logs what a fresh process would);
- what ``_get_and_verify_max_len`` was given and returned (the derived length, its key, the
  rope parameters it read);
- every file the process opened, and every folder it listed, under the model folder or the
  hub cache (``sys.addaudithook``);
- with ``--hub``: the model is a repo id served by a local HTTP hub (``MiniHub`` below),
  online, into an empty hub cache; every request the hub saw is recorded.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ORACLE = REPO.parent / "shared" / "oracle" / "run_oracle.py"

#: engine arguments whose value is one of vLLM's config objects
CONFIG_OBJECT_ARGS = {"pooler_config": ("vllm.config.pooler", "PoolerConfig"),
                      "kv_events_config": ("vllm.config.kv_events", "KVEventsConfig")}


def load_run_oracle():
    spec = importlib.util.spec_from_file_location("run_oracle19", ORACLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("cases")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--extra-path", action="append", default=[],
                    help="folder put in front of sys.path (the transformers overlay)")
    ap.add_argument("--cases-root", default=str(HERE),
                    help="folder the cases' relative config_dir paths start from")
    ap.add_argument("--cache-dir", default=None, help="HF/vLLM caches (default: a temp dir)")
    ap.add_argument("--hub", action="store_true",
                    help="the cases name repo ids, served by a local hub")
    ns = ap.parse_args(argv)

    cases = json.loads(Path(ns.cases).read_text())
    root = Path(ns.cases_root).resolve()
    tmp = tempfile.TemporaryDirectory(prefix="issue29-config-")
    cache = Path(ns.cache_dir or tmp.name).resolve()
    hub = None
    if ns.hub:
        repos = {}
        for c in cases:
            folder = root / c["folder"]
            repos[c["repo_id"]] = {str(p.relative_to(folder)): p.read_bytes()
                                   for p in sorted(folder.rglob("*")) if p.is_file()}
        hub = MiniHub(repos)
        # read by huggingface_hub at import time: set before vLLM is imported
        os.environ.update({"HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0",
                           "TRANSFORMERS_OFFLINE": "0", "HF_HOME": str(cache / "hf-hub"),
                           "HF_HUB_DISABLE_TELEMETRY": "1"})
    ro = load_run_oracle()
    ro.setup_environment(types.SimpleNamespace(
        cache_dir=str(cache), platform="cuda", gpu_name="NVIDIA H200", capability="9.0",
        gpu_mem_mib=143771, num_gpus=8, extra_path=ns.extra_path))
    hf_home = Path(os.environ["HF_HOME"]).resolve()

    import vllm  # noqa: F401
    import vllm.config.model as vcm
    import vllm.logger as vlogger
    from vllm.config import ModelConfig, VllmConfig
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext

    # ---- observation only -------------------------------------------------------------------
    state: dict[str, Any] = {}
    records: list[logging.LogRecord] = []
    opened: list[str] = []
    listed: list[str] = []
    watch: dict[str, Any] = {"roots": []}

    orig_try_verify = VllmConfig.try_verify_and_update_config
    orig_model_verify = ModelConfig._try_verify_and_update_model_config

    def try_verify_observer(self):
        state["stage"] = "VllmConfig.try_verify_and_update_config"
        result = orig_try_verify(self)
        state["stage"] = "VllmConfig.__post_init__ (after try_verify)"
        return result

    def model_verify_observer(self):
        state["stage"] = "ModelConfig._try_verify_and_update_model_config"
        result = orig_model_verify(self)
        state["stage"] = "ModelConfig.__post_init__ (after model verify)"
        return result

    VllmConfig.try_verify_and_update_config = try_verify_observer
    ModelConfig._try_verify_and_update_model_config = model_verify_observer

    orig_max_len = vcm._get_and_verify_max_len

    def max_len_observer(hf_config, model_arch_config, tokenizer_config, max_model_len,
                         *args, **kwargs):
        derived, key = model_arch_config.derived_max_model_len_and_key
        probe = {"derived_before_rope": ro.jsonable(derived), "derived_type": type(derived).__name__,
                 "key": key, "hf_text_config_class": type(hf_config).__name__,
                 "model_type": getattr(hf_config, "model_type", None),
                 "rope_parameters": ro.jsonable(getattr(hf_config, "rope_parameters", None)),
                 "tokenizer_config_model_max_length": ro.jsonable(
                     (tokenizer_config or {}).get("model_max_length")),
                 "user_max_model_len": max_model_len}
        state.setdefault("max_len_calls", []).append(probe)
        result = orig_max_len(hf_config, model_arch_config, tokenizer_config, max_model_len,
                              *args, **kwargs)
        probe["returned"] = result
        return result

    vcm._get_and_verify_max_len = max_len_observer

    orig_handle = logging.Logger.handle

    def recording_handle(self, record):
        if record.name == "vllm" or record.name.startswith("vllm."):
            records.append(record)
        return orig_handle(self, record)

    logging.Logger.handle = recording_handle

    def audit(event: str, args: tuple) -> None:
        if not watch["roots"]:
            return
        if event == "open":
            path = args[0]
        elif event in ("os.listdir", "os.scandir"):
            path = args[0]
        else:
            return
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, (str, os.PathLike)):
            return
        path = os.path.abspath(os.fspath(path))
        for r in watch["roots"]:
            if path == r or path.startswith(r + os.sep):
                rel = os.path.relpath(path, r)
                if ns.hub:
                    # the hub cache: only the snapshot's files say what was read (locks,
                    # blobs and temporary names are huggingface_hub's own)
                    if "/snapshots/" not in rel:
                        return
                    rel = "snapshot:" + rel.split("/snapshots/", 1)[1].split("/", 1)[1]
                (opened if event == "open" else listed).append(rel)
                return

    sys.addaudithook(audit)

    import vllm.transformers_utils.config as vtc
    import vllm.transformers_utils.repo_utils as vru
    import vllm.transformers_utils.utils as vtu

    def clear_once_caches():
        """What a fresh process starts with: vLLM's *_once log caches and its memoised
        readers of the files beside config.json are empty."""
        for n in ("_print_debug_once", "_print_info_once", "_print_warning_once",
                  "_print_error_once"):
            f = getattr(vlogger, n, None)
            if f is not None and hasattr(f, "cache_clear"):
                f.cache_clear()
        for f in (vtc.get_pooling_config, vtc.get_sentence_transformer_tokenizer_config,
                  vtc.try_get_dense_modules, vru.list_repo_files, vtu.maybe_model_redirect):
            if hasattr(f, "cache_clear"):
                f.cache_clear()

    def build_kwargs(case):
        if "repo_id" in case:
            model = case["repo_id"]
            cdir = root / case["folder"]
        else:
            cdir = (root / case["config_dir"]).resolve()
            model = str(cdir)
        kwargs: dict[str, Any] = {"model": model, "skip_tokenizer_init": True}
        implied: dict[str, Any] = {"skip_tokenizer_init": True}
        cj = json.loads((cdir / "config.json").read_text())
        ac = (cj.get("auto_map") or {}).get("AutoConfig")
        if isinstance(ac, str) and "trust_remote_code" not in case["args"]:
            if (cdir / (ac.split("--")[-1].rsplit(".", 1)[0] + ".py")).exists():
                kwargs["trust_remote_code"] = implied["trust_remote_code"] = True
        for k, v in case["args"].items():
            if k in CONFIG_OBJECT_ARGS and isinstance(v, dict):
                mod, cls = CONFIG_OBJECT_ARGS[k]
                v = getattr(__import__(mod, fromlist=[cls]), cls)(**v)
            kwargs[k] = v
        world = (kwargs.get("tensor_parallel_size") or 1) * (kwargs.get("pipeline_parallel_size") or 1)
        if isinstance(world, int) and world > 1 and kwargs.get("distributed_executor_backend") is None:
            kwargs["distributed_executor_backend"] = implied["distributed_executor_backend"] = "mp"
        return model, cdir, kwargs, implied

    results = []
    for case in cases:
        model, cdir, kwargs, implied = build_kwargs(case)
        state.clear()
        records.clear()
        opened.clear()
        listed.clear()
        clear_once_caches()
        saved_env = {k: os.environ.get(k) for k in case.get("env", {})}
        os.environ.update(case.get("env", {}))
        watch["roots"] = [str(hf_home)] if ns.hub else [str(cdir)]
        if hub is not None:
            hub.requests.clear()
        t0 = time.perf_counter()
        vc = None
        try:
            vc = EngineArgs(**kwargs).create_engine_config(
                usage_context=UsageContext.OPENAI_API_SERVER)
            error = None
        except Exception as e:  # noqa: BLE001 - vLLM's answer, recorded
            error = ro.describe_error(e)
            error["stage"] = state.get("stage", "before ModelConfig verify")
        watch["roots"] = []
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        res: dict[str, Any] = {
            "name": case["name"], "item": case.get("item"), "args": case["args"],
            "implied_args": implied, "status": "error" if error else "resolved", "error": error,
            "logs": [{"level": r.levelname, "logger": r.name, "message": _message(r)}
                     for r in records if r.levelno >= logging.INFO
                     # import-time lines of the first case only
                     and not r.name.startswith("vllm.triton_utils")],
            "max_len": state.get("max_len_calls"),
            "files_opened": _dedup(opened), "folders_listed": _dedup(listed),
        }
        if "repo_id" in case:
            res["repo_id"] = case["repo_id"]
            res["hub_requests"] = [[m, p.split("?", 1)[0], r] for m, p, r in hub.requests]
        else:
            res["config_dir"] = case["config_dir"]
        if case.get("env"):
            res["env"] = case["env"]
        if vc is not None:
            res["final"] = summary(vc, ro)
        res["seconds"] = round(time.perf_counter() - t0, 2)
        results.append(res)
        print(f"[ask_config] {case['name']}: "
              f"{'ERROR ' + (error.get('root_type') or error['type']) if error else 'ok'}",
              file=sys.stderr, flush=True)
    if hub is not None:
        hub.close()

    from vllm.platforms import current_platform
    out = {"vllm_version": vllm.__version__,
           "transformers_version": __import__("transformers").__version__,
           "platform": {"class": type(current_platform).__name__,
                        "device_name": current_platform.get_device_name(),
                        "device_capability": list(current_platform.get_device_capability()),
                        "device_total_memory": current_platform.get_device_total_memory()},
           "usage_context": "OPENAI_API_SERVER", "results": results}
    text = json.dumps(out, indent=1, default=str)
    # no machine paths in the committed results
    for a, b in ((str(root) + "/", ""), (sys.prefix.rstrip("/") + "/", "$VENV19/"),
                 (str(cache) + "/", "$CACHE/"), (str(REPO.parent) + "/", "")):
        text = text.replace(a, b)
    Path(ns.output).write_text(text + "\n")
    tmp.cleanup()
    return 0


class MiniHub:
    """A hub on 127.0.0.1 for the repo-id cases: the model-info and tree API (what vLLM's
    ``list_repo_files`` asks) and ``resolve`` (HEAD and GET) of each file, at one commit.
    ``requests`` logs (method, path, Range header) of every request."""

    COMMIT = "0" * 39 + "1"

    def __init__(self, repos: dict[str, dict[str, bytes]]):
        import hashlib
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.requests: list[tuple[str, str, str | None]] = []
        hub = self

        def send(h, code, body=b"", headers=None):
            h.send_response(code)
            for k, v in (headers or {}).items():
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            if h.command != "HEAD":
                h.wfile.write(body)

        def tree(files, sub, recursive):
            out, dirs = [], set()
            for name, data in sorted(files.items()):
                if sub and not name.startswith(sub + "/"):
                    continue
                rest = name[len(sub) + 1:] if sub else name
                if "/" in rest and not recursive:
                    dirs.add((sub + "/" if sub else "") + rest.split("/", 1)[0])
                    continue
                out.append({"type": "file", "path": name, "size": len(data),
                            "oid": hashlib.sha1(data).hexdigest()})
            return [{"type": "directory", "path": d, "oid": "0" * 40} for d in sorted(dirs)] + out

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def handle_any(self):
                hub.requests.append((self.command, self.path, self.headers.get("Range")))
                path, _, query = self.path.partition("?")
                parts = path.strip("/").split("/")
                if parts[0] == "api" and len(parts) >= 4 and parts[1] == "models":
                    repo = "/".join(parts[2:4])
                    files = repos.get(repo)
                    if files is None:
                        return send(self, 404, b"{}", {"X-Error-Code": "RepoNotFound"})
                    if len(parts) >= 6 and parts[4] == "tree":
                        body = tree(files, "/".join(parts[6:]), "recursive=true" in query.lower()
                                    or "recursive=1" in query)
                    else:
                        body = {"id": repo, "modelId": repo, "sha": hub.COMMIT, "private": False,
                                "siblings": [{"rfilename": n} for n in sorted(files)]}
                    return send(self, 200, json.dumps(body).encode(),
                                {"Content-Type": "application/json"})
                if len(parts) >= 5 and parts[2] == "resolve":
                    repo, name = "/".join(parts[:2]), "/".join(parts[4:])
                    files = repos.get(repo)
                    if files is None:
                        return send(self, 404, b"", {"X-Error-Code": "RepoNotFound"})
                    data = files.get(name)
                    if data is None:
                        return send(self, 404, b"", {"X-Error-Code": "EntryNotFound",
                                                     "X-Repo-Commit": hub.COMMIT})
                    return send(self, 200, data, {"X-Repo-Commit": hub.COMMIT,
                                                  "ETag": '"' + hashlib.sha256(data).hexdigest() + '"'})
                return send(self, 404, b"", {"X-Error-Code": "RepoNotFound"})

            do_GET = do_HEAD = handle_any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _message(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except Exception as e:  # noqa: BLE001
        return f"<unformattable {record.msg!r}: {e}>"


def _dedup(items: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for i in items:
        seen.setdefault(i, None)
    return list(seen)


def summary(vc, ro) -> dict[str, Any]:
    """The fields issue 29's items read, from the returned VllmConfig."""
    mc, cc, sc, pc = vc.model_config, vc.cache_config, vc.scheduler_config, vc.parallel_config
    j = ro.jsonable
    out: dict[str, Any] = {
        "model_config": {
            "architecture": mc.architecture, "model_type": getattr(mc.hf_config, "model_type", None),
            "dtype": j(mc.dtype), "max_model_len": mc.max_model_len, "runner_type": mc.runner_type,
            "convert_type": mc.convert_type, "quantization": mc.quantization,
            "is_hybrid": mc.is_hybrid, "use_mla": mc.use_mla, "attn_type": ro._try(lambda: mc.attn_type),
            "is_attention_free": mc.is_attention_free,
        },
        "cache_config": {k: j(getattr(cc, k, None)) for k in (
            "block_size", "user_specified_block_size", "cache_dtype", "enable_prefix_caching",
            "mamba_block_size", "mamba_page_size_padded", "mamba_cache_mode", "mamba_cache_dtype",
            "mamba_ssm_cache_dtype", "calculate_kv_scales", "sliding_window")},
        "scheduler_config": {k: j(getattr(sc, k, None)) for k in (
            "enable_chunked_prefill", "max_num_batched_tokens", "max_num_seqs",
            "disable_hybrid_kv_cache_manager", "max_num_partial_prefills",
            "long_prefill_token_threshold")},
        "parallel_config": {"tensor_parallel_size": pc.tensor_parallel_size},
        "attention_config": {"backend": j(vc.attention_config.backend)},
        "pooler_config": None if mc.pooler_config is None else j(mc.pooler_config),
    }
    qc = getattr(mc.hf_config, "quantization_config", None)
    if qc is not None:
        qd = qc if isinstance(qc, dict) else getattr(qc, "to_dict", lambda: {"repr": repr(qc)})()
        out["hf_quantization_config"] = {k: j(v) for k, v in qd.items()
                                         if k not in ("exclude_modules", "ignore", "config_groups",
                                                      "quantized_layers")}
        if isinstance(qd.get("quantization"), dict):
            out["hf_quantization_config"]["quantization"] = {
                k: j(v) for k, v in qd["quantization"].items() if k != "exclude_modules"}
    quant = getattr(vc, "quant_config", None)
    if quant is not None:
        out["quant_config"] = {"class": type(quant).__name__, "name": ro._try(quant.get_name)}
        for attr in ("quant_algo", "kv_cache_quant_algo", "kv_cache_quant_method", "group_size",
                     "is_checkpoint_fp8_serialized", "is_checkpoint_nvfp4_serialized",
                     "exclude_modules"):
            if hasattr(quant, attr):
                out["quant_config"][attr] = j(getattr(quant, attr))
    return out


if __name__ == "__main__":
    sys.exit(main())
