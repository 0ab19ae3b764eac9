#!/usr/bin/env python3
"""Write ``backends.json``: what vLLM 0.19.0 does with an attention backend the caller chose
for layers whose head size it cannot serve (Gemma 4: sliding layers of 256, global ones of 512).

Run it with the interpreter of the vLLM 0.19.0 oracle venv and the transformers 5.5 overlay
Gemma 4 needs (``../shared/oracle``'s README builds both); a development tool, never a test
dependency::

    ORACLE_VENV/bin/python tests/capacity_oracle/make_backends.py --oracle-dir ORACLE --overlay TF55_OVERLAY

For each case it builds the engine config with ``EngineArgs(...).create_engine_config()`` on
the oracle's emulated H200, then, inside ``set_current_vllm_config``, asks vLLM's own
``get_attn_backend`` for each head size the model's attention layers have, as the
``Attention`` layer does when the model is built at engine start: the backend it gets, or the
error it raises.  A GPU-less oracle answers this fully: the choice is made from the config and
the device capability alone.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parents[1] / "tests" / "data" / "vllm-0.19.0" / "configs"

#: (config folder, engine args, the head sizes of its attention layers)
CASES = (
    ("gemma-4-26b-a4b", {"attention_backend": "FLASH_ATTN"}, (256, 512)),
    ("gemma-4-26b-a4b", {"attention_backend": "FLASH_ATTN", "kv_cache_dtype": "fp8"}, (256, 512)),
    ("gemma-4-26b-a4b", {"attention_backend": "FLASHINFER"}, (256, 512)),
    ("gemma-4-26b-a4b", {"attention_backend": "TRITON_ATTN"}, (256, 512)),
    ("gemma-4-26b-a4b", {"attention_backend": "FLEX_ATTENTION"}, (256, 512)),
    ("gemma4-text-default", {"attention_backend": "FLASH_ATTN"}, (256, 512)),
)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--oracle-dir", required=True, help="the folder holding the oracle's run_oracle.py")
    ap.add_argument("--overlay", required=True, help="the transformers 5.5 overlay folder")
    ap.add_argument("-o", "--output", default=str(HERE / "backends.json"))
    ns = ap.parse_args(argv)
    sys.path.insert(0, str(Path(ns.oracle_dir).resolve()))
    import run_oracle

    run_oracle.setup_environment(types.SimpleNamespace(
        cache_dir=str(Path(ns.oracle_dir).resolve() / ".cache"), platform="cuda", gpu_name="NVIDIA H200",
        capability="9.0", gpu_mem_mib=143771, num_gpus=8, extra_path=[str(Path(ns.overlay).resolve())]))
    os.chdir(tempfile.mkdtemp(prefix="backend-oracle-"))  # no checkout folder shadows a package
    logging.getLogger("vllm").setLevel(logging.ERROR)

    import transformers
    import vllm
    from vllm.config import set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.attention.selector import get_attn_backend

    results = []
    for folder, args, heads in CASES:
        vc = EngineArgs(model=str(FIXTURES / folder), skip_tokenizer_init=True, **args).create_engine_config(
            usage_context=UsageContext.OPENAI_API_SERVER)
        per_head = {}
        with set_current_vllm_config(vc):
            for head in heads:
                try:
                    got = get_attn_backend(head, vc.model_config.dtype, vc.cache_config.cache_dtype,
                                           use_mm_prefix=vc.model_config.is_mm_prefix_lm)
                    per_head[str(head)] = {"backend": got.get_name(), "error": None}
                except ValueError as exc:
                    per_head[str(head)] = {"backend": None, "error": f"{type(exc).__name__}: {exc}"}
        results.append({"config": folder, "engine_args": args, "head_sizes": per_head})
        print(f"[backend-oracle] {folder} {args}: {per_head}", file=sys.stderr)
    doc = {"produced_by": {"vllm": vllm.__version__, "transformers": transformers.__version__,
                           "platform": "CUDA, NVIDIA H200, compute capability 9.0 (device queries emulated)",
                           "script": "tests/capacity_oracle/make_backends.py"},
           "cases": results}
    Path(ns.output).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
