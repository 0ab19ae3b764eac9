"""A plugin's stage is bounded in time, and what it sets meets the checks the caller's values
meet (issue 34, item 12).

- A stage that does not return within the limit (``Pipeline(stage_timeout=)``,
  ``--stage-timeout``, ``ENGINECFG_STAGE_TIMEOUT``; 10 s by default) fails the run with
  ``StageTimeoutError`` naming it; the run is recorded as failed, never as resolved, and the
  abandoned thread's later work is not recorded.
- A stage that assigns ``cache_config.block_size = 3`` or ``model_config.max_model_len = 7``
  directly is refused where vLLM refuses such a config, naming the stage and the field; a
  value past the config's own validation is refused as the caller's flag is.

The stages here wait on an event the test sets, not on a clock: nothing is timed but the
limit itself.
"""

from __future__ import annotations

import json
import os
import threading
import textwrap

import pytest

from support import CONFIGS, run_cli
from enginecfg import (
    ConfigRejectedError, EngineCfgError, EngineConfig, FrozenConfigError, InvalidInputError, Pipeline, Stage,
    StageError, StageTimeoutError,
)
from enginecfg.pipeline import events
from enginecfg.pipeline.engine_args import config_value_error, parse_engine_args
from enginecfg.pipeline.timelimit import DEFAULT_STAGE_TIMEOUT, STAGE_TIMEOUT_ENV
from enginecfg.stages import BUILTIN_STAGES

QWEN = CONFIGS / "qwen3.5-27b"


def _pipeline(*extra: Stage, **options) -> Pipeline:
    return Pipeline([*BUILTIN_STAGES, *extra], gpu_validation="off", **options)


def _failures():
    seen = []

    def listener(sender, event):
        seen.append(event)
    events.run_failed.connect(listener)
    return seen, lambda: events.run_failed.disconnect(listener)


# -- the time limit ----------------------------------------------------------------------------


class Waits(Stage):
    """Waits until the test lets it go, then tries to change the config."""
    name = "test-waits"
    after = ("pooling",)
    before = ("engine-defaults",)

    def __init__(self, where: str = "run"):
        self.where = where
        self.go = threading.Event()
        self.done = threading.Event()
        self.late: list[str] = []

    def _wait_then_change(self, cfg, ctx=None):
        self.go.wait(60)
        try:
            if ctx is not None:
                ctx.set("scheduler_config", "max_num_seqs", 9, reason="late")
            cfg.scheduler_config.max_num_seqs = 11
        except BaseException as exc:  # what the abandoned thread meets
            self.late.append(type(exc).__name__)
        finally:
            self.done.set()

    def applies(self, cfg):
        if self.where == "applies":
            self._wait_then_change(cfg)
        return True

    def run(self, cfg, ctx):
        self._wait_then_change(cfg, ctx)


@pytest.mark.parametrize("where, doing", [("run", "running"), ("applies", "deciding whether it applies")])
def test_a_stage_past_the_limit_fails_the_run_naming_it(where, doing):
    stage = Waits(where)
    seen, stop = _failures()
    try:
        with pytest.raises(StageTimeoutError) as err:
            _pipeline(stage, stage_timeout=0.2).resolve(str(QWEN))
    finally:
        stop()
        stage.go.set()
    exc = err.value
    assert isinstance(exc, StageError) and exc.stage == "test-waits" and exc.timeout == 0.2
    assert f"stage 'test-waits' (local {__name__}) did not finish within the stage time limit of 0.2 s " \
           f"while {doing}" in str(exc)
    assert [e.status for e in seen] == ["rejected"] and seen[0].stage == "test-waits"
    assert seen[0].error["type"] == "StageTimeoutError"
    # the abandoned thread goes on alone: its late change is refused and not recorded
    assert stage.done.wait(30)
    assert stage.late == ["FrozenConfigError"]
    assert not any(c["field"] == "scheduler_config.max_num_seqs" for c in exc.document["changes"])


def test_listing_the_stages_bounds_a_plugins_applies_too():
    from enginecfg import describe_stages

    stage = Waits("applies")
    pipeline = _pipeline(stage, stage_timeout=0.2)
    try:
        with pytest.raises(StageTimeoutError, match="stage 'test-waits' .* while deciding whether it applies"):
            describe_stages(pipeline, EngineConfig.from_pretrained(str(QWEN)))
    finally:
        stage.go.set()


def test_a_stage_within_the_limit_runs_as_before():
    stage = Waits()
    stage.go.set()
    result = _pipeline(stage, stage_timeout=30).resolve(str(QWEN))
    assert result.status == "resolved"
    assert [(c.field, c.new) for c in result.changes if c.stage == "test-waits"] == [
        ("scheduler_config.max_num_seqs", 9), ("scheduler_config.max_num_seqs", 11)]


def test_the_limit_comes_from_the_argument_the_environment_or_the_default(monkeypatch):
    monkeypatch.delenv(STAGE_TIMEOUT_ENV, raising=False)
    assert Pipeline().stage_timeout == DEFAULT_STAGE_TIMEOUT == 10
    monkeypatch.setenv(STAGE_TIMEOUT_ENV, "2.5")
    assert Pipeline().stage_timeout == 2.5
    assert Pipeline(stage_timeout=4).stage_timeout == 4
    for bad in ("soon", "0", "-1", "inf", "nan"):
        monkeypatch.setenv(STAGE_TIMEOUT_ENV, bad)
        with pytest.raises(InvalidInputError, match=f"invalid stage_timeout \\({STAGE_TIMEOUT_ENV}\\): got"):
            Pipeline()
    monkeypatch.delenv(STAGE_TIMEOUT_ENV)
    for bad in (0, -3, True, [], float("inf"), 1e12, "1e12"):  # past threading.TIMEOUT_MAX: no wait takes it
        with pytest.raises(InvalidInputError, match="allowed: a positive number of seconds"):
            Pipeline(stage_timeout=bad)


_SLOW_PLUGIN = textwrap.dedent('''
    import threading
    from enginecfg import Stage

    RELEASE = threading.Event()
    PRINTED = threading.Event()

    class Slow(Stage):
        name = "test-slow"
        after = ("pooling",)
        before = ("engine-defaults",)

        def run(self, cfg, ctx):
            RELEASE.wait(60)
            print("late words of test-slow")
            PRINTED.set()
''')


@pytest.fixture
def slow_plugin(tmp_path, monkeypatch):
    root = tmp_path / "slow-plugin"
    info = root / "enginecfg_test_slow-0.1.dist-info"
    info.mkdir(parents=True)
    (root / "enginecfg_test_slow.py").write_text(_SLOW_PLUGIN)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: enginecfg-test-slow\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[enginecfg.stages]\nslow = enginecfg_test_slow:Slow\n")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("ENGINECFG_PLUGINS", "enginecfg-test-slow")
    import enginecfg_test_slow  # the module discovery imports (once per process)

    enginecfg_test_slow.RELEASE.clear()
    enginecfg_test_slow.PRINTED.clear()
    yield enginecfg_test_slow
    enginecfg_test_slow.RELEASE.set()


@pytest.mark.parametrize("how", ["flag", "env"])
def test_the_cli_refuses_a_slow_plugin_and_records_the_run_as_failed(slow_plugin, tmp_path, how):
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    if how == "flag":
        proc = run_cli("run", str(QWEN), "--db", url, "--stage-timeout", "0.3")
    else:
        proc = run_cli("run", str(QWEN), "--db", url, env={STAGE_TIMEOUT_ENV: "0.3"})
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert "stage 'test-slow' (enginecfg-test-slow 0.1) did not finish within the stage time limit of 0.3 s" \
        in proc.stderr
    runs = json.loads(run_cli("runs", "--json", "--db", url).stdout)
    assert [r["status"] for r in runs] == ["rejected"]


def test_the_cli_refuses_a_limit_that_is_no_number():
    proc = run_cli("run", str(QWEN), "--no-audit", "--stage-timeout", "soon")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "invalid stage_timeout (--stage-timeout): got 'soon'; allowed: a positive number of seconds" in proc.stderr


# -- what a plugin sets ------------------------------------------------------------------------


class Assigns(Stage):
    """Assigns fields directly (not through the context), after *after*."""
    name = "test-assigns"

    def __init__(self, after: str, before: str, **fields):
        self.after, self.before = (after,), (before,)
        self.fields = fields

    def run(self, cfg, ctx):
        for dotted, value in self.fields.items():
            section, field = dotted.split("__")
            if isinstance(value, tuple):  # past the config's own validation
                object.__setattr__(getattr(cfg, section), field, value[0])
            else:
                setattr(getattr(cfg, section), field, value)


def _refused(stage: Stage, **engine_args) -> EngineCfgError:
    seen, stop = _failures()
    try:
        with pytest.raises(EngineCfgError) as err:
            _pipeline(stage).resolve(str(QWEN), **engine_args)
    finally:
        stop()
    assert len(seen) == 1 and seen[0].status == err.value.status  # recorded as failed, not resolved
    return err.value


def test_a_block_size_of_3_after_the_hybrid_alignment_is_refused_as_vllm_refuses_it():
    err = _refused(Assigns("hybrid-alignment", "vllm-checks", cache_config__block_size=3))
    assert isinstance(err, ConfigRejectedError) and err.vllm_type == "NotImplementedError"
    assert err.stage == "test-assigns"
    assert str(err).startswith(f"stage 'test-assigns' (local {__name__}) changed cache_config.block_size, which the "
                               "checks of stage 'hybrid-alignment' refuse: The page size of the layer is not "
                               "divisible by the maximum page size.")


def test_a_max_model_len_of_7_after_the_checks_is_refused_by_them():
    err = _refused(Assigns("vllm-checks", "engine-start", model_config__max_model_len=7))
    assert isinstance(err, ConfigRejectedError) and err.stage == "test-assigns"
    assert "changed model_config.max_model_len, which the checks of stage 'vllm-checks' refuse: " \
           "--mamba-block-size can only be set with --enable-prefix-caching" in str(err)


def test_a_max_model_len_over_the_models_maximum_is_refused_in_vllms_words():
    err = _refused(Assigns("vllm-checks", "engine-start", model_config__max_model_len=10_000_000))
    assert isinstance(err, ConfigRejectedError) and err.stage == "test-assigns"
    assert "set model_config.max_model_len to 10000000: User-specified max_model_len (10000000) is greater " \
           "than the derived max_model_len" in str(err)


@pytest.mark.parametrize("field, value, flag", [
    ("block_size", 0, "--block-size"),
    ("mamba_cache_dtype", "bfloat16", "--mamba-cache-dtype"),
])
def test_a_value_past_the_configs_validation_gets_the_callers_refusal(field, value, flag):
    err = _refused(Assigns("vllm-checks", "engine-start", **{f"cache_config__{field}": (value,)}))
    try:
        parse_engine_args({field: value})
        from enginecfg.pipeline.engine_args import refusal
        users = refusal(field, value)
    except InvalidInputError as exc:
        users = exc
    assert users is not None and flag in str(users)
    assert isinstance(err, InvalidInputError) and err.stage == "test-assigns"
    assert str(err) == f"stage 'test-assigns' (local {__name__}) set cache_config.{field} to {value!r}: {users}"


def test_the_scheduler_limits_hold_for_a_plugins_value():
    err = _refused(Assigns("vllm-checks", "engine-start", scheduler_config__max_num_seqs=100_000))
    assert "max_num_batched_tokens (8192) must be greater than or equal to max_num_seqs (100000)" in str(err)
    assert err.stage == "test-assigns"


def test_a_value_vllm_takes_from_the_caller_is_taken_from_a_plugin():
    """A block size of 3 before the alignment is grown as the caller's --block-size 3 is."""
    plugin = _pipeline(Assigns("pooling", "engine-defaults", cache_config__block_size=3)).resolve(str(QWEN))
    user = _pipeline().resolve(str(QWEN), block_size=3)
    assert plugin.config.cache_config.block_size == user.config.cache_config.block_size == 784


def test_config_value_error_reads_the_argument_checks():
    assert config_value_error("cache_config.block_size", 16) is None
    assert config_value_error("model_config.architecture", "x") is None  # no engine argument's
    assert "(--max-model-len)" in str(config_value_error("model_config.max_model_len", 0))
    assert "allowed: " in str(config_value_error("cache_config.cache_dtype", "fp9"))
    assert config_value_error("cache_config.mamba_block_size", None) is None  # unset is allowed
    assert isinstance(config_value_error("parallel_config.tensor_parallel_size", 0), InvalidInputError)


def test_the_stage_is_frozen_out_after_a_timeout(monkeypatch):
    """The config a timed-out stage held is frozen: a later assignment raises."""
    stage = Waits()
    with pytest.raises(StageTimeoutError):
        cfg = EngineConfig.from_pretrained(str(QWEN))
        try:
            _pipeline(stage, stage_timeout=0.2).run(cfg)
        finally:
            stage.go.set()
    with pytest.raises(FrozenConfigError):
        cfg.cache_config.block_size = 32


def test_what_an_abandoned_stage_prints_later_never_reaches_stdout(slow_plugin, capsys):
    """The run is over and its document may be on stdout: the worker left past its limit
    prints when it wakes, and that goes to stderr."""
    with pytest.raises(StageTimeoutError):
        Pipeline(gpu_validation="off", stage_timeout=0.2).resolve(QWEN)
    print("the run document")
    slow_plugin.RELEASE.set()
    assert slow_plugin.PRINTED.wait(10)
    out, err = capsys.readouterr()
    assert out == "the run document\n"
    assert "late words of test-slow" in err


def _pinnable() -> bool:
    import ctypes
    import os

    try:
        ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError):
        return False
    return hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) > 1


@pytest.mark.skipif(not _pinnable(), reason="needs Linux's CPU affinity, glibc's sched_getcpu and 2 CPUs")
def test_the_worker_is_woken_on_the_callers_cpu_and_runs_the_call_on_all_of_its_own(monkeypatch):
    """A plugin's stage is handed to an idle worker thread; waking it on another CPU that
    idles costs a round trip of ~70 us, on the caller's (who only waits) ~8 us.  Before the
    hand-over the worker may wake only on one CPU, the caller's, and the caller waits on that
    CPU too (waking it elsewhere would be a second trip); the call itself, and any thread it
    starts, runs on every CPU the process may use, and the caller has all of its CPUs back
    once the call has returned."""
    import os

    from enginecfg.pipeline import timelimit

    everywhere = os.sched_getaffinity(0)
    caller = threading.get_native_id()
    real = os.sched_setaffinity
    asked: list[tuple[int, set[int]]] = []

    def recording(tid, cpus):
        asked.append((tid, set(cpus)))
        real(tid, cpus)

    monkeypatch.setattr(os, "sched_setaffinity", recording)
    seen: list[set[int]] = []
    waiting: list[set[int]] = []

    def call() -> None:
        seen.append(os.sched_getaffinity(0))
        waiting.append(os.sched_getaffinity(caller))
        started = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
        started.start()
        started.join()

    for _ in range(3):
        timelimit.call_with_limit(call, 10, "affinity")
        assert os.sched_getaffinity(0) == everywhere
    worker = timelimit._IDLE[-1]
    assert seen == [everywhere] * 6
    assert len(asked) == 12
    for (tid, cpus), (me, mine), (own, back), (me_again, mine_again) in zip(
            asked[::4], asked[1::4], asked[2::4], asked[3::4]):
        assert tid == worker.thread.native_id and len(cpus) == 1 and cpus < everywhere
        assert (me, mine) == (0, cpus)  # the caller waits where the worker wakes
        assert (own, back) == (0, everywhere)
        assert (me_again, mine_again) == (0, everywhere)
    assert all(len(cpus) == 1 for cpus in waiting)
    assert os.sched_getaffinity(worker.thread.native_id) == everywhere


@pytest.mark.parametrize("release, words", [("0.32.0", "Chunked prefill is required for mamba cache mode 'align'."),
                                            ("0.34.0", "Chunked prefill is required for Mamba prefix caching.")])
def test_chunked_prefill_turned_off_after_the_mode_is_refused_in_the_releases_words(release, words):
    from enginecfg.pipeline.plugins import discover_stages

    stage = Assigns("mamba-cache-mode", "vllm-checks", scheduler_config__enable_chunked_prefill=False)
    stages = discover_stages("none", release=release)
    pipeline = Pipeline([*stages, stage], vllm_version=release, gpu_validation="off")
    with pytest.raises(ConfigRejectedError) as err:
        pipeline.resolve(str(QWEN), enable_prefix_caching=True)
    assert "changed scheduler_config.enable_chunked_prefill, which the checks of stage 'mamba-cache-mode' " \
           f"refuse: {words}" in str(err.value)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_keeps_none_of_the_workers_or_their_pipes():
    """A forked child has none of its parent's threads: no idle worker is handed a call there,
    and the wake-up pipes of the parent's workers are closed in it."""
    from enginecfg.pipeline import timelimit

    timelimit.call_with_limit(lambda: None, 10, "before-fork")
    worker = timelimit._IDLE[-1]
    fds = (worker._wake_r, worker._wake_w)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: which of the pipe's ends are still open, and how many workers idle
        open_ends = []
        for fd in fds:
            try:
                os.fstat(fd)
                open_ends.append(fd)
            except OSError:
                pass
        os.write(write, f"{len(timelimit._IDLE)} {len(open_ends)}".encode())
        os._exit(0)
    os.close(write)
    said = os.read(read, 64).decode()
    os.waitpid(pid, 0)
    os.close(read)
    assert said == "0 0"
    assert timelimit.call_with_limit(lambda: 7, 10, "after-fork") == 7  # the parent's worker still serves
