"""``enginecfg check-log``: real start-up logs (tests/data/logs) beside the same deployment
resolved here, through the library function, the command line and the audit store."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from enginecfg.commands import check_log
from enginecfg.pipeline.errors import InvalidInputError
from support import REPO, run_cli

LOGS = REPO / "tests" / "data" / "logs"
INDEX = {d["slug"]: d for d in json.loads((LOGS / "index.json").read_text())}
CONFIGS = REPO / "tests" / "data" / "vllm-0.19.0" / "configs"
OFFLINE = {"HF_HUB_OFFLINE": "1"}

NEXT = "file-qwen3-next-80b-a3b-instruct-tp2-h200"
QWEN35 = "vllm-40691-qwen3.5-27b-h20"
MTP = "file-qwen3.6-27b-nvfp4-mtp"


def _text(slug: str) -> str:
    return (LOGS / slug / "start.log").read_text()


def _checked(slug: str, **kw):
    args = {**(INDEX[slug]["check"] or {}), **kw}
    if "model" in args:
        args["model"] = str(REPO / args["model"])
    return check_log(_text(slug), source=slug, **args)


def _by_name(c) -> dict:
    return {ch.name: ch for ch in c.checks}


# --------------------------------------------------------------------------- the figures
def test_qwen35_on_0_19_0_the_two_figures_users_ask_about_agree_and_why_they_do_not_multiply_out():
    # vLLM #40691: 290,864 tokens and 33.04x, with no memory logged
    c = _checked(QWEN35)
    checks = _by_name(c)
    size, conc = checks["GPU KV cache size"], checks["Maximum concurrency"]
    assert (size.logged, size.expected, size.agrees) == (290864, 290864, True)
    assert (conc.logged, conc.expected, conc.agrees) == ("33.04", "33.04", True)
    # the figures pin the block count, and with it the bytes of KV cache the start had
    assert conc.implied["blocks"] == {"low": 1487, "high": 1487}
    per_block = 16 * 3_211_264  # 16 layer slots of 784-token pages (Mamba page padded to 3,211,264)
    assert conc.implied["kv_cache_memory"] == {"low": 1487 * per_block, "high": 1488 * per_block - 1}
    assert "1,487 // 4 x 784 = 290,864" in size.why
    (why,) = [e for e in c.observation.explanations if e.startswith("Why \"GPU KV cache size")]
    assert "1,487 / 45 = 33.04" in why and "cdiv(32,768, 784) = 42" in why
    assert c.engine_args == {"trust_remote_code": True, "max_model_len": 32768, "max_num_seqs": 16,
                             "max_num_batched_tokens": 16384}
    assert set(c.set_aside) == {"load_format"}


def test_qwen3_next_every_exact_figure_agrees_under_the_nearest_release_given_the_logged_memory():
    c = _checked(NEXT)
    assert (c.logged_release, c.vllm_version, c.gpu) == ("0.10.2", "0.19.0", "H200")
    assert "0.10.2 is not a release enginecfg speaks" in c.release_note and "compared under 0.19.0" in c.release_note
    assert c.engine_args == {"tensor_parallel_size": 2}
    checks = _by_name(c)
    exact = {n: (ch.logged, ch.expected, ch.agrees) for n, ch in checks.items() if ch.exact}
    assert exact == {
        "Using max model len": (262144, 262144, True),
        "Chunked prefill is enabled with max_num_batched_tokens": (8192, 8192, True),
        "Setting attention block size": (544, 544, True),
        "Padding mamba page size": ("1.49", "1.49", True),
        "attention backend": ("FLASH_ATTN", "FLASH_ATTN", True),
        "GPU KV cache size": (973760, 973760, True),
        "Maximum concurrency": ("14.77", {"low": "14.76", "high": "14.77"}, True),
    }
    # 44.59 GiB stands for 7,161 to 7,163 blocks; 14.77x only for 7,162 and 7,163
    assert checks["Maximum concurrency"].implied["blocks"] == {"low": 7162, "high": 7163}
    assert "ceil(548,864 / 1,024) = 536" in checks["Setting attention block size"].why
    # the estimate is an estimate: said as one, with its error
    avail = checks["Available KV cache memory"]
    assert avail.exact is False and "estimated before loading" in avail.why
    memory = c.observation.memory
    assert memory["logged"]["available_kv_cache_memory"]["low"] == 47_872_779_224
    assert isinstance(memory["predicted"]["available_kv_cache_memory"], int)


def test_a_log_of_a_start_enginecfg_does_not_model_says_why_each_figure_differs():
    # nvidia/Qwen3.6-27B-NVFP4 with an MTP drafter, logged by a 0.23 build: the drafter's layers and blocks
    c = _checked(MTP)
    assert c.vllm_version == "0.19.0" and c.logged_release.startswith("0.23.1")
    differs = [ch for ch in c.checks if ch.agrees is False and ch.exact]
    assert {ch.name for ch in differs} >= {"GPU KV cache size", "Maximum concurrency", "Add padding layers"}
    for ch in differs:  # never a bare "differs"
        assert "speculative_config" in ch.why or "not a release enginecfg speaks" in ch.why, ch.name
    # vLLM printed a negative estimate (-0.81 GiB) there: outside any range a capture can take
    graphs = _by_name(c)["Estimated CUDA graph memory"]
    assert graphs.agrees is False and graphs.exact is False and "CUDA-graph part" in graphs.why


def test_0_34_0s_figures_agree_with_vllm_0_34_0s_own_worked_case():
    # no public log of 0.34.0 was found; vLLM 0.34.0's own answer for the published Qwen3.5-27B config
    # at 64 GiB (tests/data/vllm-0.34.0/RULES.md K8 case 1: 1,260 blocks, 325 a request,
    # 1,016,312 tokens; S2-S6: blocks of 832, the Mamba page padded by 200,704 bytes), in its words
    text = (
        "(APIServer pid=1) INFO 09-18 22:20:01 [api_utils.py:339]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.34.0\n"
        "(EngineCore pid=9) INFO 09-18 22:21:10 [interface.py:1121] Setting attention block size to 832 tokens to "
        "ensure that attention page size is >= mamba page size.\n"
        "(EngineCore pid=9) INFO 09-18 22:21:10 [interface.py:1145] Padding mamba page size by 6.26% to ensure that "
        "mamba page size and attention page size are exactly equal.\n"
        "(EngineCore pid=9) INFO 09-18 22:23:40 [gpu_worker.py:796] Available KV cache memory: 64.0 GiB\n"
        "(EngineCore pid=9) INFO 09-18 22:23:42 [kv_cache_utils.py:1170] GPU KV cache size: 1,016,312 tokens, "
        "Maximum concurrency for 262,144 tokens per request: 3.88x\n")
    c = check_log(text, model=str(CONFIGS / "qwen3.5-27b"))
    assert (c.logged_release, c.vllm_version, c.release_note) == ("0.34.0", "0.34.0", None)
    exact = {n: (ch.expected, ch.agrees) for n, ch in _by_name(c).items() if ch.exact}
    assert exact == {"Setting attention block size": (832, True), "Padding mamba page size": ("6.26", True),
                     "GPU KV cache size": (1016312, True), "Maximum concurrency": ("3.88", True)}
    size = _by_name(c)["GPU KV cache size"]
    assert size.implied["blocks"] == {"low": 1260, "high": 1260}
    assert "int(1,260 / 325 x 262,144) = 1,016,312" in size.why
    # the same log under 0.19.0: its block size and formula are not 0.34.0's, and it says so
    old = check_log(text, model=str(CONFIGS / "qwen3.5-27b"), vllm_version="0.19.0")
    assert _by_name(old)["Setting attention block size"].agrees is False
    assert "compared under 0.19.0 as asked" in old.release_note


def test_the_logged_start_up_error_is_checked_at_the_memory_it_names():
    text = ("(EngineCore pid=9) ValueError: To serve at least one request with the model's max seq len (262144), "
            "(16.5 GiB KV cache is needed, which is larger than the available KV cache memory (1.95 GiB). Based on "
            "the available memory, the estimated maximum model length is 24128.")
    c = check_log(text, model=str(CONFIGS / "qwen3.5-27b"), vllm_version="0.34.0")
    (ch,) = c.checks
    assert ch.name == "start-up error" and ch.agrees is True, ch.expected
    assert ch.expected.startswith(ch.logged) and "estimated maximum model length is 24128" in ch.expected
    # RULES.md K8 case 1 at 2 GiB; one estimate off and the check says so
    wrong = check_log(text.replace("24128", "24129"), model=str(CONFIGS / "qwen3.5-27b"), vllm_version="0.34.0")
    assert wrong.checks[0].agrees is False


@pytest.mark.parametrize("slug", sorted(s for s, d in INDEX.items() if d["release"].startswith(("0.19", "0.34"))))
def test_on_the_0_19_and_0_34_logs_every_recomputable_figure_agrees_or_the_reason_is_named(slug, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    d = INDEX[slug]
    if d["check"] is None:
        # nothing to recompute with: the repository holds no config of the model (SOURCE.md says so)
        assert "config: none in the repository" in (LOGS / slug / "SOURCE.md").read_text()
        c = check_log(_text(slug))
        assert c.error is not None and c.checks == ()
        return
    c = _checked(slug)
    exact = [ch for ch in c.checks if ch.exact]
    assert exact and all(ch.agrees for ch in exact), [(ch.name, ch.logged, ch.expected) for ch in exact]


@pytest.mark.parametrize("slug", sorted(s for s, d in INDEX.items() if d["check"]))
def test_every_log_with_a_config_agrees_on_each_exact_figure_or_its_index_entry_names_why(slug, monkeypatch):
    # the logs of other releases too: a line that differs is named in index.json with its reason, and
    # check-log's own answer says it compared under another release than the log's
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    named = INDEX[slug].get("differs", {})
    c = _checked(slug)
    exact = [ch for ch in c.checks if ch.exact]
    assert exact or slug == "vllm-42510-llama-3.1-8b-block-size"  # its excerpt ends inside the engine line
    differs = {ch.name for ch in exact if ch.agrees is False}
    assert differs == set(named), [(ch.name, ch.logged, ch.expected) for ch in exact if ch.agrees is False]
    for ch in exact:
        if ch.agrees is False:
            assert named[ch.name] and "not a release enginecfg speaks" in ch.why, ch.name


def test_qwen35_9b_on_an_l40s_under_0_19_0_block_padding_and_figures_agree_exactly():
    # a 0.19.0 start of the published Qwen3.5-9B on an L40S, nothing given but the model
    c = _checked("file-qwen3.5-9b-l40s")
    assert (c.logged_release, c.vllm_version, c.release_note) == ("0.19.0", "0.19.0", None)
    checks = _by_name(c)
    assert (checks["Setting attention block size"].logged, checks["Setting attention block size"].agrees) == (528, True)
    assert checks["Padding mamba page size"].expected == "0.76"
    assert "ceil(2,146,304 / 4,096) = 524" in checks["Setting attention block size"].why
    size, conc = checks["GPU KV cache size"], checks["Maximum concurrency"]
    assert (size.logged, size.expected, size.agrees) == (165792, 165792, True)
    assert conc.agrees and conc.implied["blocks"] == {"low": 1258, "high": 1258}
    assert "1,258 // 4 x 528 = 165,792" in size.why
    (why,) = [e for e in c.observation.explanations if e.startswith("Why \"GPU KV cache size")]
    assert "1,258 / 500 = 2.52" in why


def test_qwen3_8b_on_an_a100_under_0_19_1_the_dense_figures_agree_given_the_logged_memory():
    c = _checked("file-qwen3-8b-a100-40gb")
    # 0.19.1 is spoken exactly (it adds no rule to 0.19.0): compared under itself
    assert c.logged_release == "0.19.1" and c.vllm_version == "0.19.1" and c.release_note is None
    checks = _by_name(c)
    assert checks["Using FlashAttention version"].expected == 2  # sm 8.0
    size = checks["GPU KV cache size"]
    # 19.36 GiB over 36 layers x 8 KV heads x 128 x 2 x 2 bytes = 147,456 bytes a token, blocks of 16
    assert size.agrees and size.implied["blocks"] == {"low": 8810, "high": 8810} and size.logged == 8810 * 16
    assert checks["Maximum concurrency"].expected == "3.44"


def test_with_no_arguments_logged_the_concurrency_line_gives_the_max_model_len(monkeypatch):
    # LMCache #1739 pasted three lines: the memory, the size and the concurrency for 32,768 tokens
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    c = _checked("lmcache-1739-qwen3-14b")
    assert c.engine_args == {"max_model_len": 32768} and "concurrency's tokens per request on line 5" in c.arguments_from
    assert {ch.name: ch.agrees for ch in c.checks if ch.exact} == {"GPU KV cache size": True,
                                                                  "Maximum concurrency": True}


def test_a_v0_block_count_is_checked_against_the_figures_beside_it(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    c = _checked("vllm-10517-llama-3.1-8b-rtx3090")
    blocks = _by_name(c)["GPU blocks"]
    assert (blocks.logged, blocks.expected, blocks.agrees) == (1478, 1478, True)
    assert _by_name(c)["Maximum concurrency"].agrees  # 1,478 / cdiv(29,000, 16) = 0.82
    assert _by_name(c)["start-up error"].agrees is None  # V0's words, and no memory to check them at


# --------------------------------------------------------------------------- release, model, input
def test_a_release_enginecfg_does_not_speak_is_compared_under_the_nearest_and_said_so():
    c = _checked(QWEN35, vllm_version="0.27.0")
    # the nearest exact release: 0.30.0 (exact since its every dated rule is wired), not 0.34.0
    assert c.vllm_version == "0.30.0" and "0.27.0 is not a release enginecfg speaks" in c.release_note
    assert c.checks  # what is still comparable is compared
    with pytest.raises(InvalidInputError, match="vllm_version"):
        check_log(_text(QWEN35), vllm_version="banana", model=str(CONFIGS / "qwen3.5-27b"))


def test_a_log_without_a_model_here_is_read_back_and_says_what_is_missing(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    c = check_log(_text("vllm-26646-qwen3-next-fp8"))
    assert c.error is not None and c.error.exit_code == 2 and "--model" in str(c.error)
    assert c.checks == () and c.start.first("kv_cache_size").value == 90048


def test_text_without_a_log_line_is_refused_plainly():
    with pytest.raises(InvalidInputError, match="none of its 2 lines is a line of a vLLM start-up log"):
        check_log("hello\nworld\n")


# --------------------------------------------------------------------------- the command line
def test_cli_text_and_exit_status():
    r = run_cli("check-log", str(LOGS / NEXT / "start.log"), "--model", str(CONFIGS / "qwen3-next-80b-a3b-thinking"),
                "--no-audit")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "Logged: vLLM 0.10.2" in out and "compared under vLLM 0.19.0" in out
    assert "GPU KV cache size" in out and "973,760" in out and "agrees" in out
    assert "do not multiply out" in out and "Why 544 tokens a block" in out
    differs = run_cli("check-log", str(LOGS / MTP / "start.log"), "--model", str(CONFIGS / "qwen3.6-27b-nvfp4"),
                      "--no-audit")
    assert differs.returncode == 1 and "DIFFERS" in differs.stdout


def test_cli_json_through_a_real_process_and_from_stdin():
    cmd = [sys.executable, "-m", "enginecfg", "check-log", "-", "--model", str(CONFIGS / "qwen3.5-27b"),
           "--gpu", "H20", "--vllm-version", "0.19.0", "--json", "--no-audit"]
    p = subprocess.run(cmd, input=_text(QWEN35), capture_output=True, text=True, cwd=REPO, timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["source"] == "standard input" and doc["vllm_version"] is None and doc["compared_under"] == "0.19.0"
    assert doc["model"] == str(CONFIGS / "qwen3.5-27b") and doc["engine_args"]["max_model_len"] == 32768
    for ch in doc["checks"]:
        assert {"name", "logged", "expected", "agrees"} <= set(ch)
    assert {"logged", "predicted"} <= set(doc["memory"])
    assert isinstance(doc["memory"]["predicted"]["available_kv_cache_memory"], int)


def test_cli_bad_input_exits_2_without_a_traceback(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("nothing to see\n")
    for args in (["check-log", str(empty)], ["check-log", str(tmp_path / "missing.log")],
                 ["check-log", str(LOGS / QWEN35 / "start.log"), "--model", str(CONFIGS / "qwen3.5-27b"),
                  "--vllm-version", "banana"],
                 ["check-log", str(LOGS / QWEN35 / "start.log"), "--gpu", "TPU-9000"]):
        r = run_cli(*args, "--no-audit", env=OFFLINE)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr + r.stdout


@pytest.mark.parametrize("slug", sorted(INDEX))
def test_every_committed_log_is_checked_without_a_traceback(slug):
    check = INDEX[slug]["check"] or {}
    args = ["check-log", str(LOGS / slug / "start.log"), "--no-audit"]
    for key, flag in (("model", "--model"), ("gpu", "--gpu"), ("vllm_version", "--vllm-version")):
        if key in check:
            args += [flag, str(REPO / check[key]) if key == "model" else check[key]]
    r = run_cli(*args, env=OFFLINE)
    assert "Traceback" not in r.stdout + r.stderr
    if check:
        assert r.returncode in (0, 1), r.stderr
    else:  # no config here: read back, compared with nothing, and said why
        assert r.returncode == 2 and "--model" in r.stdout + r.stderr


# --------------------------------------------------------------------------- the audit store
def test_the_observation_is_a_fact_of_the_recorded_run_under_the_hash_chain(db_url):
    from enginecfg.store import AuditStore

    with AuditStore(db_url).attach() as store:
        c = _checked(NEXT)
    assert store.last_run_id == c.run_id
    doc = store.get_run(c.run_id)["result"]
    observed = doc["startup_log"]
    assert observed["release"] == "0.19.0" and observed["source"] == NEXT
    assert [ch["name"] for ch in observed["checks"]] == [ch.name for ch in c.checks]
    assert doc["impact"]["memory"]["source"] == "estimate"  # predicted beside observed
    assert store.verify().ok
    shown = run_cli("show", c.run_id, "--db", db_url)
    assert shown.returncode == 0 and "start-up log checked" in shown.stdout and "973,760" in shown.stdout


def test_the_readme_shows_a_real_log_checked_as_the_command_prints_it(monkeypatch):
    text = (REPO / "README.md").read_text()
    block = text.split("```console\n$ enginecfg check-log ", 1)[1].split("```", 1)[0]
    command, printed = block.split("\n", 1)
    assert "github.com/vllm-project/vllm/issues/40691" in text  # the log's source, beside it
    monkeypatch.chdir(REPO)
    r = run_cli("check-log", *command.split(), env={"COLUMNS": "100"})
    assert r.returncode == 0 and r.stdout == printed


def test_figures_no_card_of_the_preset_could_hold_say_the_card_had_more_memory():
    # vLLM #40691 says "H20": 71.2 GiB of KV cache do not fit on the 96 GB H20 beside 50 GiB of
    # weights (an H20 with 141 GB exists); on a card that holds them, no such note
    small = [e for e in _checked(QWEN35).observation.explanations if "had more memory" in e]
    assert len(small) == 1 and "71.16 GiB" in small[0] and "the H20 (95.58 GiB)" in small[0]
    roomy = _checked(QWEN35, gpu="H200")
    assert not [e for e in roomy.observation.explanations if "had more memory" in e]


def test_a_log_without_end_is_refused_at_the_bound_not_read_into_memory():
    # /dev/zero is a file without end: refused once 64 MiB are read, exit 2, one line
    r = run_cli("check-log", "/dev/zero", "--no-audit")
    assert r.returncode == 2 and "more than the 64 MiB allowed" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
