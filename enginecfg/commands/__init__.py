"""enginecfg's commands as library functions: what ``enginecfg run``, ``explain`` and ``plan``
work out, as typed values, importable from Python.

The command line (:mod:`enginecfg.cli`) only parses arguments and prints what these return;
``to_dict()`` of each result is the command's ``--json`` document::

    from enginecfg.commands import explain, plan, run

    e = explain("path/to/model", kv_cache_dtype="fp8", memory={"gpu_memory_gib": 80})
    e.impact.kv_tokens, e.impact.concurrency_at(8192), [f.id for f in e.findings]
    p = plan("org/name", {"tensor_parallel_size": [1, 2, 4], "kv_cache_dtype": ["auto", "fp8"]})
    p.best_row("concurrency").setting
    c = check_log(open("start.log").read(), model="path/to/model")
    [(ch.name, ch.logged, ch.expected, ch.agrees) for ch in c.checks]
    for outcome in run(["model-a", "org/name"], enable_prefix_caching=True):
        outcome.exit_code, outcome.result or outcome.error

All load the model the way ``enginecfg run`` does (folders, ``config.json`` files and Hugging
Face repo ids, with the files beside the config vLLM reads).  This room sits above the
pipeline, the stages and the store, and below the command line: it never imports the CLI.
"""

from enginecfg.commands.check_log import LogCheck, LogLineCheck, check_log
from enginecfg.commands.explain import Explanation, explain
from enginecfg.commands.findings import ArgumentCause, ChangeCause, Finding, findings
from enginecfg.commands.plan import OBJECTIVES, Plan, PlanRow, plan
from enginecfg.commands.releases import ReleaseList, list_releases
from enginecfg.commands.run import RunOutcome, run
from enginecfg.commands.upgrade import Upgrade, upgrade
from enginecfg.pipeline.models.capacity import Impact, ImpactOptions, ImpactUnavailable

__all__ = [
    "run",
    "explain",
    "plan",
    "upgrade",
    "Upgrade",
    "list_releases",
    "ReleaseList",
    "check_log",
    "LogCheck",
    "LogLineCheck",
    "findings",
    "Explanation",
    "Plan",
    "PlanRow",
    "RunOutcome",
    "OBJECTIVES",
    "Finding",
    "ChangeCause",
    "ArgumentCause",
    "Impact",
    "ImpactUnavailable",
    "ImpactOptions",
]
