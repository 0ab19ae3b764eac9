"""The README's "Auditing runs from Python" example runs as written (on a fixture model)."""

from __future__ import annotations

import re

from support import CONFIGS, REPO


def test_the_readme_audit_example_runs(tmp_path, monkeypatch, warm_snapshots):
    text = (REPO / "README.md").read_text()
    section = text.split("### Auditing runs from Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)[1]
    code = code.replace('"path/to/model"', repr(str(CONFIGS / "nemotron-h-56b-base-8k")))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ENGINECFG_PLUGINS", "none")
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    store, result = scope["store"], scope["result"]
    assert (tmp_path / "audit.db").exists()
    assert store.get_run(result.run_id)["status"] == "resolved"
    explanation = store.why(result.run_id, "cache_config.block_size")["changes"][-1]["explanation"]
    assert "lcm(the Mamba chunk size 128, the kernel alignment 16) = 128" in explanation
