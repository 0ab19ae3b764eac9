"""vLLM 0.19.0's own Qwen3.5 config classes against enginecfg's rebuilt ones, object for object.

Run with the oracle's interpreter (it has vLLM's classes); it writes ``class_digests.json``:

    ORACLE/venv19/bin/python tests/typed_oracle/class_digests.py --oracle ORACLE

For every ``qwen3_5`` / ``qwen3_5_moe`` fixture config and every case of ``typed_cases.py``
the object vLLM's class builds is turned into enginecfg's snapshot (``hfsnapshot.snapshot_of``,
the checkout's own module) and kept as a digest, or the exception it raises as its type and
message.  ``tests/test_typed_oracle.py`` builds the same configs with
``enginecfg.pipeline.hf._classes`` and compares.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
from typed_cases import CONFIGS, cases, edited  # noqa: E402

QWEN_TYPES = ("qwen3_5", "qwen3_5_moe")


def configs() -> dict[str, dict[str, Any]]:
    """Every config compared, by name: the Qwen3.5 fixtures and the fuzzed cases."""
    out = {}
    for path in sorted(CONFIGS.glob("*/config.json")):
        data = json.loads(path.read_text())
        if data.get("model_type") in QWEN_TYPES:
            out[f"fixture/{path.parent.name}"] = data
    for name, path, value in cases():
        data = edited(path, value)
        if data.get("model_type") in QWEN_TYPES:
            out[name] = data
    return out


def _stable(value: Any) -> Any:
    """The snapshot without ``repr`` texts of sets (their order differs between processes)."""
    if isinstance(value, dict):
        if set(value) == {"__repr__"}:
            return "<repr>"
        return {k: _stable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def outcome(build, data: dict[str, Any]) -> str:
    """A digest of the snapshot of ``build(data)``, or the exception it raised."""
    from enginecfg.pipeline.hf.snapshot import snapshot_of

    try:
        snap = snapshot_of(build(data))
    except Exception as exc:  # the class refused the config: its answer, compared as such
        return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    text = json.dumps(_stable(snap), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--oracle", default=os.environ.get("ENGINECFG_ORACLE"),
                    required="ENGINECFG_ORACLE" not in os.environ)
    ns = ap.parse_args()
    sys.path.insert(0, str(Path(ns.oracle).resolve() / "tf523-overlay"))
    # the checkout's pipeline package under its installed name, without installing it
    root = Path(tempfile.mkdtemp())
    (root / "enginecfg").mkdir()
    (root / "enginecfg" / "__init__.py").write_text("")
    (root / "enginecfg" / "pipeline").symlink_to(REPO / "pipeline")
    sys.path.insert(0, str(root))
    import transformers
    from vllm.transformers_utils.configs.qwen3_5 import Qwen3_5Config
    from vllm.transformers_utils.configs.qwen3_5_moe import Qwen3_5MoeConfig

    classes = {"qwen3_5": Qwen3_5Config, "qwen3_5_moe": Qwen3_5MoeConfig}
    results = {name: outcome(lambda d: classes[d["model_type"]].from_dict(dict(d)), data)
               for name, data in configs().items()}
    import vllm

    doc = {"produced_by": {"vllm": vllm.__version__, "transformers": transformers.__version__},
           "results": results}
    (HERE / "class_digests.json").write_text(json.dumps(doc, indent=0, sort_keys=True) + "\n")
    print(f"wrote {len(results)} outcomes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
