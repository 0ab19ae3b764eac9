"""The README's "Auditing runs from Python" example runs as written (on the published config
under ``examples/models`` it names)."""

from __future__ import annotations

import re

from support import REPO


def test_the_readme_audit_example_runs(tmp_path, monkeypatch, warm_snapshots):
    text = (REPO / "README.md").read_text()
    section = text.split("### Auditing runs from Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)[1]
    # the example's path is relative to the clone's root; the store file goes to a temp dir
    assert '"examples/models/' in code
    code = code.replace('"examples/models/', '"' + str(REPO / "examples" / "models") + "/")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ENGINECFG_PLUGINS", "none")
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    store, result = scope["store"], scope["result"]
    assert (tmp_path / "audit.db").exists()
    assert store.get_run(result.run_id)["status"] == "resolved"
    explanation = store.why(result.run_id, "cache_config.block_size")["changes"][-1]["explanation"]
    assert "lcm(the Mamba chunk size 128, the kernel alignment 16) = 128" in explanation
