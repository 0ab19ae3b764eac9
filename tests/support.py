"""Test support: where the fixtures are, and how to read them."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

#: the checkout these tests belong to; everything the tests read lives inside it
REPO = Path(__file__).resolve().parents[1]
#: the ground truth kept in the repository (``tests/data/*/README.md`` say where each came from)
DATA = REPO / "tests" / "data"
#: what the real vLLM 0.19.0 decided on each fixture case (``cases.json``), and its configs
FIXTURES = DATA / "vllm-0.19.0"
CONFIGS = FIXTURES / "configs"
#: what the real vLLM 0.34.0 decided on the same configs (``public-034.json``, its cases)
VLLM034 = DATA / "vllm-0.34.0"
#: the published configs the README's examples run (copies of fixture configs)
EXAMPLES = REPO / "examples" / "models"

#: the log lines of vLLM's config module (what the fixtures' "messages" hold)
SEED_MESSAGE = re.compile(
    r"^(Gemma4 model has heterogeneous head dimensions|Disabling calculate_kv_scales for hybrid"
    r"|Setting attention block size to|Padding mamba page size by|Mamba cache mode is set to"
    r"|Hybrid or mamba-based model detected without support|Warning: Prefix caching in Mamba cache"
    r"|Updating mamba_ssm_cache_dtype to|Qwen3\.5 model specifies mamba_ssm_dtype)")


#: a PostgreSQL server for the audit-store tests (``.ci/postgres.sh`` prints it); unset: skipped
PG_URL = os.environ.get("ENGINECFG_TEST_PG_URL")


def kill_at_marker(proc, marker: Path, what: str, timeout: float) -> None:
    """SIGKILL *proc* as soon as it creates *marker* (its hold point), and reap it."""
    import signal
    import time

    import pytest

    try:
        deadline = time.monotonic() + timeout
        while not marker.exists():
            if proc.poll() is not None:
                pytest.fail(f"{what} exited early ({proc.returncode}): {proc.stderr.read()}")
            if time.monotonic() > deadline:
                pytest.fail(f"{what} never reached the hold point")
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        proc.stderr.close()


def load_cases() -> list[dict]:
    return json.loads((FIXTURES / "cases.json").read_text())["cases"]


def config_of_034(case: dict) -> Path:
    """The config folder of a vLLM 0.34.0 case or result: its ``config_dir`` names, relative
    to the oracle's own cases folder, a fixture config kept here under the same name."""
    return CONFIGS / Path(case["config_dir"]).name




#: which stage logs each of vLLM's config-module lines (the fixtures' "messages")
MESSAGE_STAGE = {
    "Gemma4 model has heterogeneous head dimensions": "gemma4-backend",
    "Disabling calculate_kv_scales for hybrid": "hybrid-kv-scales",
    "Mamba cache mode is set to": "mamba-cache-mode",
    "Hybrid or mamba-based model detected without support": "mamba-cache-mode",
    "Warning: Prefix caching in Mamba cache": "mamba-cache-mode",
    "Setting attention block size to": "hybrid-alignment",
    "Padding mamba page size by": "hybrid-alignment",
    "Updating mamba_ssm_cache_dtype to": "ssm-dtype",
    "Qwen3.5 model specifies mamba_ssm_dtype": "ssm-dtype",
}


def resolved_cases() -> list[dict]:
    return [c for c in load_cases() if c["expected"]["status"] == "resolved"]


def check_stage_against_fixture(stage_name: str, fields: dict[str, list[str]], case: dict) -> None:
    """Run the pipeline up to *stage_name* (``enginecfg.testing.run_stage``) on a fixture case:
    the fields the stage decides already hold vLLM's final values, and the stage logged
    exactly vLLM's lines of that step that the fixtures hold, in order."""
    from enginecfg import BUILTIN_STAGES
    from enginecfg.testing import run_stage

    stage = next(cls for cls in BUILTIN_STAGES if cls.name == stage_name)
    path = str(FIXTURES / case["config"])
    result = run_stage(stage, path, **case["engine_args"])
    config = result.to_dict()["config"]
    for section, names in fields.items():
        expected = case["expected"]["config"]
        if section in expected and expected[section] is None:
            # vLLM left the section unset (no pooler for a generate model): so must we
            assert config.get(section) is None, f"{section}: vLLM left it unset, enginecfg has {config.get(section)!r}"
            continue
        want = expected.get(section)
        for name in names:
            if want is None or name not in want:
                continue  # the fixture does not say what vLLM decided for this field
            assert config[section][name] == want[name], f"{section}.{name}"
    want_lines = [m["message"].replace("{model}", path) for m in case["expected"]["messages"]
                  if MESSAGE_STAGE.get(next((p for p in MESSAGE_STAGE if m["message"].startswith(p)), "")) == stage_name]
    # the lines the fixtures hold (vLLM's config module's); a stage may log others of vLLM's
    got_lines = [m.message for m in result.messages if m.stage == stage_name and SEED_MESSAGE.match(m.message)]
    assert got_lines == want_lines


def run_cli(*args: str, env: dict | None = None, timeout: float = 120):
    """``enginecfg ARGS`` run in this process through the CLI's ``main``: a
    ``subprocess.CompletedProcess`` with the exit code and what it wrote on stdout / stderr.

    Starting a process costs an interpreter and enginecfg's imports (and transformers' when a
    config is new), a second or more per case; this costs milliseconds.  What only a real
    process shows (its exit status at interpreter exit, a kill) stays with the tests that
    start one.  Faithful where the tests look: both the Python streams and file descriptors
    1 and 2 are captured (a library writing to the descriptor is seen); an exception that
    escapes ``main`` is written to stderr as its traceback (exit 1), as the interpreter would;
    ``SystemExit`` gives its code; a run that hangs fails after *timeout* seconds; *env* is set
    for the call only; and what a process exit would release is released afterwards (the
    audit stores the command opened, the logging set-up it changed), so one case never leaks
    into the next.
    """
    import contextlib
    import io
    import logging
    import signal
    import subprocess
    import sys
    import tempfile
    import traceback

    from enginecfg.cli import main
    from enginecfg.store import recorder

    stores: list = []
    real_init = recorder.AuditStore.__init__

    def tracked_init(self, *a, **kw):
        real_init(self, *a, **kw)
        stores.append(self)

    def on_alarm(signum, frame):
        raise TimeoutError(f"enginecfg {' '.join(args)}: no answer after {timeout}s")

    log = logging.getLogger("enginecfg")
    log_state = (list(log.handlers), log.propagate)
    old_env = {k: os.environ.get(k) for k in (env or {})}
    out, err = io.StringIO(), io.StringIO()
    fd_out, fd_err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    old_alarm = signal.signal(signal.SIGALRM, on_alarm)
    try:
        os.environ.update(env or {})
        recorder.AuditStore.__init__ = tracked_init
        os.dup2(fd_out.fileno(), 1)
        os.dup2(fd_err.fileno(), 2)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:  # noqa: BLE001 - what the interpreter would print
                traceback.print_exc()
                code = 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_alarm)
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
        recorder.AuditStore.__init__ = real_init
        for store in stores:
            store.close()
        log.handlers[:], log.propagate = log_state
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    texts = []
    for f in (fd_out, fd_err):
        f.seek(0)
        texts.append(f.read().decode(errors="replace"))
        f.close()
    return subprocess.CompletedProcess(["enginecfg", *args], code, out.getvalue() + texts[0],
                                       err.getvalue() + texts[1])


def make_stage(name: str, run=None, *, after: tuple[str, ...] = (), before: tuple[str, ...] = ()):
    """A stage (an instance of a class of its own) named *name*, with these ordering hints,
    whose ``run(cfg, ctx)`` is *run* (where None, the base class's: for stages only ordered)."""
    from enginecfg import Stage

    body = {"name": name, "after": tuple(after), "before": tuple(before)}
    if run is not None:
        body["run"] = lambda self, cfg, ctx: run(cfg, ctx)
    return type(f"Stage_{name.replace('-', '_')}", (Stage,), body)()


def append_extra_architecture(cfg, ctx) -> None:
    """A stage's run that edits a list in place, behind the context's back (no ``ctx.set``,
    no assignment): only the state taken after the stage can find it."""
    cfg.model_config.architectures.append("Extra")
