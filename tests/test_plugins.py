"""Plugins: stages from installed distributions, found, ordered, isolated and audited.

Everything here goes through real installs and real entry points.  The example plugin
(``examples/plugin``) is installed into the environment as an operator would install it
(``.ci/run`` does; if it is missing, this module installs it and removes it again at the
end).  The throwaway distributions that misbehave on purpose are pip-installed into a
directory of this session that is put on ``sys.path`` only by the tests that want them, so
no other test of the suite ever runs them.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support import CONFIGS
from enginecfg import (BUILTIN_STAGES, ConfigRejectedError, EngineConfig, FrozenConfigError, InvalidInputError, Pipeline,
                       Stage, StageError, StageOrderError)
from enginecfg.pipeline import events
from enginecfg.testing import capture_events
from enginecfg.pipeline.plugins import (ENTRY_POINT_GROUP, builtin_stages, describe_stages, plugin_policy,
                                        plugin_stages)

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "plugin"
DIST = "enginecfg-site-policy"
EP_NAME = "site-max-model-len"
QWEN = str(CONFIGS / "qwen3.5-27b")
#: the built-in order is pinned once, by test_pipeline_core.test_builtin_order_is_vllms
BUILTIN_NAMES = [cls.name for cls in BUILTIN_STAGES]


# -- installing for real -----------------------------------------------------------------------

def _pip(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "pip", *args, "--disable-pip-version-check", "-q"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"pip {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def _install_example(tmp: Path) -> None:
    """pip-install the example from a copy, so that the build leaves nothing in the repo."""
    src = tmp / "site-policy-src"
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    _pip("install", "--no-deps", "--no-build-isolation", "--root-user-action=ignore", str(src))


def _installed_matches_repo() -> bool:
    try:
        dist = md.distribution(DIST)
    except md.PackageNotFoundError:
        return False
    files = [f for f in dist.files or () if str(f).replace("\\", "/") == "enginecfg_site_policy/__init__.py"]
    if not files:
        return False
    installed = Path(dist.locate_file(files[0]))
    return installed.is_file() and \
        installed.read_text() == (EXAMPLE / "enginecfg_site_policy" / "__init__.py").read_text()


@pytest.fixture(scope="session")
def site_plugin(tmp_path_factory):
    """The example plugin, installed in this environment (installing the repo's version if
    none, or a different one, is installed); removed at the end only if this fixture added it."""
    tmp = tmp_path_factory.mktemp("site-policy")
    try:
        md.distribution(DIST)
        was_installed = True
    except md.PackageNotFoundError:
        was_installed = False
    if not _installed_matches_repo():
        _install_example(tmp)
    assert _installed_matches_repo()
    yield tmp
    if not was_installed:
        _pip("uninstall", "-y", DIST)


_TOY = {
    # a well-behaved plugin that changes the config behind the context's back, and keeps a
    # reference to the config and to its context after its run
    "extra": '''
        from enginecfg import Stage

        class DirectEdits(Stage):
            name = "extra-direct"
            after = ("vllm-checks",)
            before = ("gpu-validation",)
            kept = None

            def run(self, cfg, ctx):
                type(self).kept = (cfg, ctx)
                cfg.scheduler_config.max_num_batched_tokens = 8192           # plain assignment
                cfg.model_config.architectures.append("SiteAudited")         # in place, a list
                cfg.model_config.hf_config.site_note = "audited"              # a transformers attribute
                cfg.model_config.hf_text_config.rope_parameters["rope_theta"] = 1.0  # in place, a dict
    ''',
    "boom": '''
        from enginecfg import Stage

        class Boom(Stage):
            name = "boom"
            after = ("engine-defaults",)
            before = ("ssm-dtype",)

            def run(self, cfg, ctx):
                cfg.cache_config.block_size = 32      # made before the failure: still attributed
                raise RuntimeError("site database unreachable")
    ''',
    "broken": '''
        import enginecfg_no_such_module_anywhere  # noqa: F401  (fails at import, on purpose)
    ''',
    "notastage": '''
        def not_a_stage(cfg, ctx):
            pass
    ''',
    "dup": '''
        from enginecfg import Stage

        class MyChecks(Stage):
            name = "vllm-checks"   # the name of a built-in

            def run(self, cfg, ctx):
                pass
    ''',
}
_TOY_TARGET = {"extra": "DirectEdits", "boom": "Boom", "broken": "Anything", "notastage": "not_a_stage",
               "dup": "MyChecks"}


@pytest.fixture(scope="session")
def toy_dir(tmp_path_factory) -> Path:
    """Five throwaway distributions ``enginecfg-test-<kind>``, pip-installed (one pip run)
    into a directory of their own that no test has on ``sys.path`` unless it asks."""
    root = tmp_path_factory.mktemp("toy-plugins")
    srcs = []
    for kind, code in _TOY.items():
        src = root / "src" / kind
        src.mkdir(parents=True)
        mod = f"enginecfg_test_{kind}"
        (src / f"{mod}.py").write_text(textwrap.dedent(code))
        (src / "pyproject.toml").write_text(textwrap.dedent(f'''
            [build-system]
            requires = ["setuptools>=68"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "enginecfg-test-{kind}"
            version = "0.1.{len(srcs)}"

            [project.entry-points."enginecfg.stages"]
            {kind}-stage = "{mod}:{_TOY_TARGET[kind]}"

            [tool.setuptools]
            py-modules = ["{mod}"]
        '''))
        srcs.append(str(src))
    target = root / "site"
    _pip("install", "--no-deps", "--no-build-isolation", "--root-user-action=ignore", "--target",
         str(target), *srcs)
    return target


@pytest.fixture
def toys(toy_dir, monkeypatch):
    monkeypatch.syspath_prepend(str(toy_dir))
    return toy_dir


@pytest.fixture
def policy(monkeypatch):
    """SITE_MAX_MODEL_LEN=32768 for this test."""
    monkeypatch.setenv("SITE_MAX_MODEL_LEN", "32768")
    return 32768


def _cfg(path=QWEN, **args):
    return EngineConfig.from_pretrained(path, **args)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ENGINECFG_PLUGINS", "SITE_MAX_MODEL_LEN")}
    env.update(extra)
    return env


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=_env(**env), cwd=str(REPO.parent))


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import sys; from enginecfg.cli import main; "
                           "sys.exit(main())", *args], capture_output=True, text=True, timeout=300,
                          env=_env(**env), cwd=str(REPO.parent))


# -- the example plugin, end to end ------------------------------------------------------------

def test_example_is_discovered_through_its_entry_point(site_plugin):
    [ep] = [e for e in md.entry_points(group=ENTRY_POINT_GROUP) if e.name == EP_NAME]
    assert ep.dist.name == DIST and ep.value == "enginecfg_site_policy:SiteMaxModelLen"
    version = md.version(DIST)
    [stage] = plugin_stages(DIST)
    assert type(stage) is ep.load()
    assert stage.name == EP_NAME and stage.origin == f"{DIST} {version}"
    assert EP_NAME in Pipeline(plugins="all").stage_names


def test_example_runs_in_its_place_and_is_audited(site_plugin, policy):
    pipeline = Pipeline(plugins=DIST, gpu_validation="off")
    # after the built-ins it does not depend on, right before the stage that reads max_model_len
    assert pipeline.stage_names == BUILTIN_NAMES[:6] + [EP_NAME] + BUILTIN_NAMES[6:]
    origin = f"{DIST} {md.version(DIST)}"
    with capture_events(events.stage_started, events.config_changed, events.run_finished) as got:
        result = pipeline.run(_cfg())
    [cap] = [c for c in result.changes if c.stage == EP_NAME]
    assert (cap.field, cap.old, cap.new, cap.via, cap.level) == (
        "model_config.max_model_len", 262144, 32768, "context", "WARNING")
    assert "site policy" in cap.reason and "32768" in cap.reason and "262144" in cap.reason
    # the Mamba block size default was taken from the capped length: it ran before that stage
    [block] = result.changes_for("cache_config.mamba_block_size")
    assert block.stage == "mamba-cache-mode" and block.new == 32768
    assert result.config.model_config.max_model_len == 32768
    # the same record on the bus, with the stage's origin
    [ev] = [e for e in got["config_changed"] if e.stage == EP_NAME]
    assert (ev.seq, ev.field, ev.old, ev.new, ev.reason) == (cap.seq, cap.field, 262144, 32768, cap.reason)
    assert [(e.order, e.origin) for e in got["stage_started"] if e.stage == EP_NAME] == [(6, origin)]
    [done] = got["run_finished"]
    assert {"stage": EP_NAME, "level": "WARNING", "message": cap.reason} in done.document["messages"]
    assert any(c["stage"] == EP_NAME and c["new"] == 32768 for c in done.document["changes"])


def test_example_position_is_what_makes_it_work(site_plugin, policy):
    """The same policy one step too late leaves the Mamba block at the uncapped length, and
    vLLM's check refuses the config."""
    cls = md.entry_points(group=ENTRY_POINT_GROUP)[EP_NAME].load()

    class TooLate(cls):
        name = "site-max-model-len-late"
        after = ("mamba-cache-mode",)
        before = ("hybrid-alignment",)

    pipeline = Pipeline(stages=builtin_stages() + [TooLate()], gpu_validation="off")
    assert pipeline.stage_names.index("site-max-model-len-late") == pipeline.stage_names.index(
        "mamba-cache-mode") + 1
    with pytest.raises(ConfigRejectedError, match="--mamba-block-size can only be set with --enable-prefix"):
        pipeline.run(_cfg())


def test_example_without_a_policy_changes_nothing_and_a_bad_policy_is_refused(site_plugin, monkeypatch):
    monkeypatch.delenv("SITE_MAX_MODEL_LEN", raising=False)
    result = Pipeline(plugins=DIST, gpu_validation="off").run(_cfg())
    assert result.config.model_config.max_model_len == 262144
    assert not [c for c in result.changes if c.stage == EP_NAME]
    # under the cap it does not apply either
    monkeypatch.setenv("SITE_MAX_MODEL_LEN", "default")
    result = Pipeline(plugins=DIST, gpu_validation="off").run(_cfg(max_model_len=4096))
    assert not [c for c in result.changes if c.stage == EP_NAME]
    # an explicit request above the cap is capped, and the reason says it was asked for
    result = Pipeline(plugins=DIST, gpu_validation="off").run(_cfg(max_model_len=65536))
    [cap] = [c for c in result.changes if c.stage == EP_NAME]
    assert cap.new == 32768 and "65536 was requested" in cap.reason
    monkeypatch.setenv("SITE_MAX_MODEL_LEN", "lots")
    with pytest.raises(InvalidInputError, match="SITE_MAX_MODEL_LEN.*'lots'.*positive integer") as err:
        Pipeline(plugins=DIST, gpu_validation="off").run(_cfg())
    assert err.value.stage == EP_NAME


def test_describe_stages_lists_position_origin_and_applicability(site_plugin, policy):
    pipeline = Pipeline(plugins=DIST, gpu_validation="off")
    rows = describe_stages(pipeline)
    assert [r["name"] for r in rows] == pipeline.stage_names
    assert [r["position"] for r in rows] == list(range(len(rows)))
    assert all(r["applies"] is None for r in rows)
    row = rows[6]
    assert row == {"position": 6, "name": EP_NAME, "origin": f"{DIST} {md.version(DIST)}",
                   "after": ["pooling"], "before": ["mamba-cache-mode"], "applies": None}
    assert rows[0]["origin"] == "built-in"
    applies = {r["name"]: r["applies"] for r in describe_stages(pipeline, _cfg())}
    assert applies[EP_NAME] is True and applies["pooling"] is False and applies["mamba-cache-mode"] is True
    applies = {r["name"]: r["applies"] for r in describe_stages(pipeline, _cfg(max_model_len=1024))}
    assert applies[EP_NAME] is False
    json.dumps(rows)  # what `enginecfg stages --json` prints
    short = describe_stages(Pipeline(plugins=DIST, disable=["gemma4-backend"], gpu_validation="off"))
    assert [r["name"] for r in short][3:6] == ["ssm-dtype", "hybrid-kv-scales", EP_NAME]
    assert [r["position"] for r in short] == list(range(len(short)))


def test_stages_command_shows_the_plugin(site_plugin):
    proc = _cli("stages", QWEN, "--json", ENGINECFG_PLUGINS=DIST, SITE_MAX_MODEL_LEN="32768")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    [row] = [r for r in rows if r["name"] == EP_NAME]
    assert row["position"] == 6 and row["origin"].startswith(DIST + " ") and row["applies"] is True
    proc = _cli("stages", "--json", ENGINECFG_PLUGINS="none")
    assert proc.returncode == 0, proc.stderr
    assert [r["name"] for r in json.loads(proc.stdout)] == BUILTIN_NAMES


# -- which installed code may run ---------------------------------------------------------------

def test_plugins_none_runs_only_the_builtins(site_plugin, toys, policy, monkeypatch):
    monkeypatch.setenv("ENGINECFG_PLUGINS", "none")
    assert Pipeline().stage_names == BUILTIN_NAMES
    result = Pipeline(gpu_validation="off").run(_cfg())
    assert result.config.model_config.max_model_len == 262144
    assert {c.stage for c in result.changes} <= set(BUILTIN_NAMES)
    # the argument wins over the environment
    assert EP_NAME in Pipeline(plugins=DIST).stage_names


def test_an_allow_list_runs_only_the_named_distributions(site_plugin, toys, monkeypatch):
    installed = {e.dist.name for e in md.entry_points(group=ENTRY_POINT_GROUP)}
    assert {DIST, "enginecfg-test-extra", "enginecfg-test-boom"} <= installed
    monkeypatch.setenv("ENGINECFG_PLUGINS", "enginecfg-test-extra")
    assert Pipeline().stage_names == BUILTIN_NAMES[:-1] + ["extra-direct", "gpu-validation"]
    # names compare as package indexes compare them; several names; spaces
    monkeypatch.setenv("ENGINECFG_PLUGINS", f" Enginecfg_Test.Extra , {DIST}")
    names = Pipeline().stage_names
    assert EP_NAME in names and "extra-direct" in names and "boom" not in names
    # an allowed distribution that is not installed is simply absent
    monkeypatch.setenv("ENGINECFG_PLUGINS", "enginecfg-not-installed")
    assert Pipeline().stage_names == BUILTIN_NAMES
    # everything installed, if asked for by name
    monkeypatch.setenv("ENGINECFG_PLUGINS", "all")
    with pytest.raises(StageError, match="enginecfg-test-broken"):
        Pipeline()


def test_plugin_policy_values():
    assert plugin_policy("all") == "all" and plugin_policy("") == "all" and plugin_policy("NONE") == "none"
    assert plugin_policy("A_b.c, d") == frozenset({"a-b-c", "d"})
    with pytest.raises(InvalidInputError, match=r"ENGINECFG_PLUGINS.*'all,foo'.*not both"):
        plugin_policy("all,foo")


def test_uninstalled_it_is_gone(site_plugin):
    probe = ("import json, importlib.metadata as md; from enginecfg import Pipeline; "
             f"print(json.dumps([[e.name for e in md.entry_points(group={ENTRY_POINT_GROUP!r})], "
             "Pipeline(plugins='all').stage_names]))")
    before = _python(probe)
    assert before.returncode == 0, before.stderr
    eps, names = json.loads(before.stdout)
    assert EP_NAME in eps and EP_NAME in names
    _pip("uninstall", "-y", DIST)
    try:
        after = _python(probe)
        assert after.returncode == 0, after.stderr
        eps, names = json.loads(after.stdout)
        assert EP_NAME not in eps and EP_NAME not in names
        assert names == BUILTIN_NAMES
        # in this process too: discovery reads the installed metadata each time
        assert EP_NAME not in Pipeline(plugins="all").stage_names
    finally:
        _install_example(site_plugin)
    assert _installed_matches_repo()
    assert EP_NAME in Pipeline(plugins="all").stage_names


# -- isolation: failures are clean, named and recorded --------------------------------------------

def test_a_plugin_that_raises_fails_the_run_cleanly(toys):
    origin = f"enginecfg-test-boom {md.version('enginecfg-test-boom')}"
    pipeline = Pipeline(plugins="enginecfg-test-boom", gpu_validation="off")
    assert pipeline.stage_names[:6] == ["pooling", "engine-defaults", "scheduler", "gemma4-backend", "boom",
                                        "ssm-dtype"]
    with capture_events(events.run_failed, events.stage_finished, events.config_changed) as got:
        with pytest.raises(StageError) as err:
            pipeline.run(_cfg())
    exc = err.value
    assert exc.stage == "boom" and exc.origin == origin and exc.exit_code == 1
    assert str(exc) == (f"stage 'boom' ({origin}) failed while running: "
                        f"RuntimeError: site database unreachable")
    assert isinstance(exc.__cause__, RuntimeError)
    [failed] = got["run_failed"]
    assert failed.stage == "boom" and failed.status == "rejected"
    assert failed.error["type"] == "StageError" and origin in failed.error["message"]
    assert [(e.stage, e.outcome) for e in got["stage_finished"]][-1] == ("boom", "failed")
    # what it changed before failing is on the record, as its own
    assert [(e.stage, e.field, e.via) for e in got["config_changed"]][-1] == (
        "boom", "cache_config.block_size", "direct")
    assert any(c["stage"] == "boom" and c["via"] == "direct" for c in failed.document["changes"])


def test_a_plugin_that_raises_exits_1_with_one_line(toys):
    proc = _cli("run", QWEN, "--no-audit", "--gpu-validation", "off",
                ENGINECFG_PLUGINS="enginecfg-test-boom", PYTHONPATH=os.pathsep.join([str(toys), os.environ.get("PYTHONPATH", "")]))
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "boom" in lines[0] and "enginecfg-test-boom" in lines[0] and "site database unreachable" in lines[0]
    assert "Traceback" not in proc.stderr


def test_plugins_that_cannot_load_are_named(toys):
    with pytest.raises(StageError, match=r"'broken-stage'.*enginecfg-test-broken 0\.1\.\d.*could not be "
                                         r"loaded.*ModuleNotFoundError") as err:
        Pipeline(plugins="enginecfg-test-broken")
    assert err.value.origin.startswith("enginecfg-test-broken ")
    with pytest.raises(InvalidInputError, match=r"'notastage-stage'.*enginecfg-test-notastage.*not an "
                                                r"enginecfg.Stage"):
        Pipeline(plugins="enginecfg-test-notastage")


def test_a_plugin_may_not_take_a_builtin_name(toys):
    with pytest.raises(StageOrderError, match=r"two stages are named 'vllm-checks': one from built-in, "
                                              r"one from enginecfg-test-dup 0\.1\.\d"):
        Pipeline(plugins="enginecfg-test-dup")


def test_ordering_errors_name_the_stages():
    class Loop(Stage):
        name = "site-loop"
        after = ("gpu-validation",)
        before = ("pooling",)

        def run(self, cfg, ctx):
            pass

    with pytest.raises(StageOrderError, match=r"cycle: .*site-loop.*pooling|cycle: .*pooling.*site-loop"):
        Pipeline(stages=builtin_stages() + [Loop()])

    class Lost(Stage):
        name = "site-lost"
        after = ("mamba-cache-modes",)

        def run(self, cfg, ctx):
            pass

    lost = Lost()
    lost.origin = "enginecfg-site-lost 1.0"
    with pytest.raises(StageOrderError, match=r"'site-lost' \(enginecfg-site-lost 1\.0\) names an unknown "
                                              r"stage in after: 'mamba-cache-modes'; known stages: pooling"):
        Pipeline(stages=builtin_stages() + [lost])


def test_direct_mutations_of_a_plugin_are_attributed_to_it(toys):
    origin = f"enginecfg-test-extra {md.version('enginecfg-test-extra')}"
    with capture_events(events.config_changed, events.stage_started) as got:
        result = Pipeline(plugins="enginecfg-test-extra", gpu_validation="off").run(_cfg())
    mine = {c.field: c for c in result.changes if c.stage == "extra-direct"}
    assert set(mine) == {"scheduler_config.max_num_batched_tokens", "model_config.architectures",
                         "hf_config.site_note", "hf_config.text_config.rope_parameters"}
    assert all(c.via == "direct" for c in mine.values())
    assert mine["scheduler_config.max_num_batched_tokens"].new == 8192
    assert mine["model_config.architectures"].new[-1] == "SiteAudited"
    assert mine["hf_config.site_note"].old is None and mine["hf_config.site_note"].new == "audited"
    assert mine["hf_config.text_config.rope_parameters"].new["rope_theta"] == 1.0
    assert "outside the stage context" in mine["hf_config.site_note"].reason
    assert {e.field for e in got["config_changed"] if e.stage == "extra-direct"} == set(mine)
    assert [e.origin for e in got["stage_started"] if e.stage == "extra-direct"] == [origin]


def test_a_plugin_that_kept_the_config_cannot_change_it_after_the_run(toys):
    pipeline = Pipeline(plugins="enginecfg-test-extra", gpu_validation="off")
    result = pipeline.run(_cfg())
    [stage] = [s for s in pipeline.stages if s.name == "extra-direct"]
    cfg, ctx = type(stage).kept
    assert cfg is result.config and cfg.frozen
    with pytest.raises(FrozenConfigError):
        cfg.model_config.max_model_len = 1024
    with pytest.raises(FrozenConfigError):
        cfg.model_config.hf_config.site_note = "later"
    with pytest.raises(FrozenConfigError):
        ctx.set("cache_config", "block_size", 64, reason="after the fact")
    with pytest.raises(FrozenConfigError):
        ctx.set("hf_config", "site_note", "later", reason="after the fact")
    with pytest.raises((TypeError, AttributeError)):
        cfg.model_config.architectures.append("Later")
    with pytest.raises((TypeError, AttributeError)):
        cfg.model_config.hf_text_config.rope_parameters["rope_theta"] = 2.0
    assert cfg.model_config.max_model_len == 262144
    assert cfg.model_config.hf_config.site_note == "audited"
    assert cfg.model_config.hf_text_config.rope_parameters["rope_theta"] == 1.0
    assert result.to_dict()["fingerprint"] == result.fingerprint


def test_a_listener_cannot_change_the_config_once_frozen():
    """A plugin listening to run_finished gets plain data; reaching for the config it kept
    from its stage is refused."""
    kept = {}

    class Keeper(Stage):
        name = "keeper"

        def run(self, cfg, ctx):
            kept["cfg"] = cfg

    def late(sender, event=None, **_):
        kept["cfg"].cache_config.block_size = 128

    events.run_finished.connect(late, weak=False)
    try:
        with pytest.raises(FrozenConfigError, match="frozen.*cache_config.block_size"):
            Pipeline(stages=[Keeper()]).run(_cfg())
    finally:
        events.run_finished.disconnect(late)
    assert kept["cfg"].cache_config.block_size == 16


def test_a_mutation_inside_applies_is_attributed():
    class Sneaky(Stage):
        name = "sneaky"

        def applies(self, cfg):
            cfg.cache_config.block_size = 64
            return False

        def run(self, cfg, ctx):
            raise AssertionError("never runs")

    with capture_events(events.stage_finished) as got:
        result = Pipeline(stages=[Sneaky()]).run(_cfg())
    assert [(c.stage, c.field, c.old, c.new, c.via) for c in result.changes] == [
        ("sneaky", "cache_config.block_size", 16, 64, "direct")]
    [done] = got["stage_finished"]
    assert (done.outcome, done.changes) == ("skipped", 1)


def test_a_plugin_calling_exit_fails_the_run_instead_of_the_process():
    class Quitter(Stage):
        name = "quitter"

        def run(self, cfg, ctx):
            raise SystemExit(3)

    with capture_events(events.run_failed) as got:
        with pytest.raises(StageError, match=r"'quitter'.*SystemExit"):
            Pipeline(stages=[Quitter()]).run(_cfg())
    assert [e.stage for e in got["run_failed"]] == ["quitter"]


def test_a_stage_handed_in_directly_is_not_called_built_in():
    class Local(Stage):
        name = "local-check"

        def run(self, cfg, ctx):
            pass

    assert Local().origin == f"local {Local.__module__}"
    assert all(s.origin == "built-in" for s in builtin_stages())
    rows = describe_stages(Pipeline(stages=[Local()]))
    assert rows[0]["origin"].startswith("local ")


# -- disable / only ----------------------------------------------------------------------------------

def test_disable_and_only_select_plugin_stages_too(site_plugin, policy):
    names = Pipeline(plugins=DIST, disable=[EP_NAME]).stage_names
    assert names == BUILTIN_NAMES
    result = Pipeline(plugins=DIST, disable=[EP_NAME], gpu_validation="off").run(_cfg())
    assert result.config.model_config.max_model_len == 262144
    only = Pipeline(plugins=DIST, only=[EP_NAME, "mamba-cache-mode"])
    assert only.stage_names == [EP_NAME, "mamba-cache-mode"]
    result = only.run(_cfg())
    assert [(c.stage, c.field, c.new) for c in result.changes] == [
        (EP_NAME, "model_config.max_model_len", 32768), ("mamba-cache-mode", "cache_config.mamba_block_size", 32768)]
    with pytest.raises(InvalidInputError, match=r"invalid stage: got 'site-max-model-length'.*site-max-model-len"):
        Pipeline(plugins=DIST, disable=["site-max-model-length"])
    with pytest.raises(InvalidInputError, match="invalid stage"):
        Pipeline(plugins="none", only=[EP_NAME])


def test_the_testing_kit_runs_a_plugin_stage_as_the_pipeline_would(monkeypatch, site_plugin):
    # the example of docs/plugins.md ("Testing a stage"), for real
    from enginecfg.testing import run_stage
    from enginecfg_site_policy import SiteMaxModelLen

    monkeypatch.setenv("SITE_MAX_MODEL_LEN", "32768")
    with capture_events() as got:
        result = run_stage(SiteMaxModelLen(), QWEN)
    assert result.config.model_config.max_model_len == 32768
    assert [e.field for e in got["config_changed"] if e.stage == EP_NAME] == ["model_config.max_model_len"]
    # ordered after pooling and engine-defaults (its hints), nothing after it ran
    assert result.stages[-1] == EP_NAME and "gpu-validation" not in result.stages
