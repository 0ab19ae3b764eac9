"""Plugin discovery is read once per installed state: cheap Pipeline(), yet installs are seen."""

from __future__ import annotations

import shutil
import textwrap

from enginecfg import Pipeline
from enginecfg.pipeline import plugins


def _install(site, name: str) -> None:
    """A distribution laid out as an installer leaves it: a module and its ``*.dist-info``."""
    mod = name.replace("-", "_")
    (site / f"{mod}.py").write_text(textwrap.dedent(f"""
        from enginecfg import Stage

        class Probe(Stage):
            name = "{name}-stage"
            after = ("hybrid-alignment",)

            def run(self, cfg, ctx):
                pass
    """))
    info = site / f"{mod}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{plugins.ENTRY_POINT_GROUP}]\n{name}-stage = {mod}:Probe\n")


def test_pipelines_share_one_scan_until_the_installed_state_changes(tmp_path, monkeypatch):
    scans = []
    real = plugins.entry_points

    def counting(**kw):
        scans.append(kw)
        return real(**kw)

    monkeypatch.setattr(plugins, "entry_points", counting)
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))  # a new sys.path: one scan
    names = Pipeline(gpu_validation="off").stage_names
    for _ in range(50):
        assert Pipeline(gpu_validation="off").stage_names == names
    assert len(scans) == 1

    _install(site, "enginecfg-test-cached")  # installed into a folder already on the path
    with_probe = Pipeline(gpu_validation="off").stage_names
    assert len(scans) == 2
    assert "enginecfg-test-cached-stage" in with_probe and "enginecfg-test-cached-stage" not in names
    stage = next(st for st in Pipeline(gpu_validation="off").stages if st.name == "enginecfg-test-cached-stage")
    assert stage.origin == "enginecfg-test-cached 0.1"
    assert len(scans) == 2

    shutil.rmtree(site / "enginecfg_test_cached-0.1.dist-info")  # uninstalled
    assert Pipeline(gpu_validation="off").stage_names == names
    assert len(scans) == 3


def test_each_pipeline_gets_its_own_stage_instances():
    a, b = Pipeline(gpu_validation="off"), Pipeline(gpu_validation="off")
    assert a.stage_names == b.stage_names
    assert all(x is not y for x, y in zip(a.stages, b.stages))
