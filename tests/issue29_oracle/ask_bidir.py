#!/usr/bin/env python3
"""Ask the real vLLM what its LlamaBidirectional config hook makes of each case at config time.

Plain Python for ``write`` and for driving the oracles; the asking itself runs in the oracle
venvs::

    python tests/issue29_oracle/ask_bidir.py write                # configs/llama-bidir-* and cases-bidir.json
    python tests/issue29_oracle/ask_bidir.py config   [--ref DIR] # vLLM 0.19.0 -> bidir_config_time.json
    python tests/issue29_oracle/ask_bidir.py config34 [--ref DIR] # vLLM 0.34.0 -> bidir_config_time_034.json

``--ref DIR`` (default ``$ENGINECFG_ORACLE_REF``, else ``../ref`` beside the checkout) holds
``venv19``, ``venv34`` and the transformers overlay ``tf523-overlay`` (5.23.0), built as the
oracles' READMEs say.  0.19.0 is asked through ``ask_config.py`` (the issue 29 config-time
driver: the stage an exception left from, the root exception, every ``vllm.*`` log line), with
the hook's own fields added to its summary: ``hf_config.is_causal`` and ``hf_config.pooling``
as the returned config holds them.  0.34.0 is asked through the 0.34 oracle
(``shared/oracle34/run_oracle34.py --no-build``: config time only).

The cases: the two folders ``cases.py`` built for the start-up questions
(``llama-bidir-avg``, ``llama-bidir-cls``) under the start-up argument sets and the
scheduler's length check; the other pooling names (``last``, an unknown one, ``null``, none,
a list); and the sequence-classification registry name.  The oracle is a development tool:
tests read only the committed JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CONSTRUCTED = HERE / "configs"

#: the small Llama shape of cases.py's constructed folders, as a bidirectional model
_BIDIR = {"architectures": ["LlamaBidirectionalModel"], "model_type": "llama", "hidden_size": 1024,
          "intermediate_size": 2816, "num_hidden_layers": 4, "num_attention_heads": 16,
          "num_key_value_heads": 8, "max_position_embeddings": 8192, "vocab_size": 32000,
          "torch_dtype": "bfloat16", "rms_norm_eps": 1e-5}
_ABSENT = object()


def _bidir(pooling: Any = _ABSENT, **over: Any) -> dict[str, Any]:
    cfg = dict(_BIDIR, **over)
    if pooling is not _ABSENT:
        cfg["pooling"] = pooling
    return cfg


#: the folders this script writes (llama-bidir-avg and -cls are cases.py's; written the same)
FOLDERS: dict[str, dict[str, Any]] = {
    "llama-bidir-last": _bidir("last"),
    "llama-bidir-mean": _bidir("mean"),
    "llama-bidir-null": _bidir(None),
    "llama-bidir-nopool": _bidir(),
    "llama-bidir-list": _bidir(["avg"]),
    "llama-bidir-seqcls-avg": _bidir("avg", architectures=["LlamaBidirectionalForSequenceClassification"]),
    "llama-bidir-seqcls-cls": _bidir("cls", architectures=["LlamaBidirectionalForSequenceClassification"]),
}

#: the start-up driver's argument sets for these folders, and the scheduler's length check
ARGSETS: dict[str, dict[str, Any]] = {
    "default": {}, "fp8": {"kv_cache_dtype": "fp8"}, "prefix": {"enable_prefix_caching": True},
    "chunked": {"enable_chunked_prefill": True}, "bs32": {"block_size": 32},
    "tp2": {"tensor_parallel_size": 2}, "be-flashinfer": {"attention_backend": "FLASHINFER"},
    "be-triton": {"attention_backend": "TRITON_ATTN"},
    "mnbt-1024": {"max_num_batched_tokens": 1024},
    "chunked+mnbt-1024": {"enable_chunked_prefill": True, "max_num_batched_tokens": 1024},
    "maxlen-1024+mnbt-1024": {"max_model_len": 1024, "max_num_batched_tokens": 1024},
}


def cases() -> list[dict[str, Any]]:
    out = []

    def add(folder: str, name: str, args: dict[str, Any]) -> None:
        out.append({"name": f"bidir/{folder}/{name}", "item": "bidir",
                    "config_dir": str(Path("configs") / folder), "args": args})

    for folder in ("llama-bidir-avg", "llama-bidir-cls", "llama-bidir-last"):
        for name, args in ARGSETS.items():
            add(folder, name, args)
    for folder in ("llama-bidir-seqcls-avg", "llama-bidir-seqcls-cls"):
        for name in ("default", "fp8", "mnbt-1024"):
            add(folder, name, ARGSETS[name])
    for folder in ("llama-bidir-mean", "llama-bidir-null", "llama-bidir-nopool", "llama-bidir-list"):
        add(folder, "default", {})
        # which comes first: the length check before the hook, the cache config after it
        add(folder, "maxlen-huge", {"max_model_len": 16_777_216})
        add(folder, "kv-int3", {"kv_cache_dtype": "int3"})
    return out


def write() -> None:
    for name, cfg in FOLDERS.items():
        folder = CONSTRUCTED / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    (HERE / "cases-bidir.json").write_text(json.dumps(cases(), indent=1) + "\n")


# ---------------------------------------------------------------------------------------------
# in the 0.19.0 oracle venv: ask_config.py with the hook's fields in its summary
# ---------------------------------------------------------------------------------------------
def ask19(argv: list[str]) -> int:
    sys.path.insert(0, str(HERE))
    import ask_config

    plain = ask_config.summary

    def summary(vc, ro):
        out = plain(vc, ro)
        hf = vc.model_config.hf_config
        out["hf_config"] = {"is_causal": ro.jsonable(getattr(hf, "is_causal", None)),
                            "has_pooling": hasattr(hf, "pooling"),
                            "pooling": ro.jsonable(getattr(hf, "pooling", None))}
        return out

    ask_config.summary = summary
    return ask_config.main(argv)


# ---------------------------------------------------------------------------------------------
# driving the oracles
# ---------------------------------------------------------------------------------------------
def _ref(ns: argparse.Namespace) -> Path:
    return Path(ns.ref or os.environ.get("ENGINECFG_ORACLE_REF") or str(REPO.parent / "ref")).resolve()


def _clean(path: Path) -> None:
    """No machine paths in the committed results."""
    text = path.read_text()
    for a, b in ((str(HERE) + "/", ""), (str(REPO.parent) + "/", "")):
        text = text.replace(a, b)
    doc = json.loads(text)
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["ask19"]:
        return ask19(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("write", help="write the folders and cases-bidir.json")
    for name in ("config", "config34"):
        p = sub.add_parser(name, help="ask the oracle")
        p.add_argument("--ref", help="folder of venv19/, venv34/ and tf523-overlay/")
    ns = ap.parse_args(argv)
    write()
    if ns.cmd == "write":
        return 0
    ref = _ref(ns)
    work = HERE / ".work"
    work.mkdir(exist_ok=True)
    if ns.cmd == "config":
        out = HERE / "bidir_config_time.json"
        cmd = [str(ref / "venv19" / "bin" / "python"), str(Path(__file__).resolve()), "ask19",
               str(HERE / "cases-bidir.json"), "-o", str(out), "--extra-path", str(ref / "tf523-overlay"),
               "--cases-root", str(HERE)]
    else:
        out = HERE / "bidir_config_time_034.json"
        oracle34 = REPO.parent / "shared" / "oracle34" / "run_oracle34.py"
        # the 0.34 oracle resolves config_dir against the cases file's folder
        cmd = [str(ref / "venv34" / "bin" / "python"), str(oracle34), str(HERE / "cases-bidir.json"),
               "-o", str(out), "--no-build"]
    print("+", " ".join(cmd), file=sys.stderr)
    # a neutral working directory: vLLM's model-inspection subprocess runs `python -m`
    subprocess.run(cmd, check=True, cwd=work)
    _clean(out)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
