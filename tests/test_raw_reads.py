"""No model-config field is read around :mod:`enginecfg.pipeline.hf.typed` (a static check).

``rawreads.raw_reads`` walks every module of ``pipeline/`` and ``stages/`` (see its
docstring for what counts as a raw read); each one found must be on the allow-list below,
with the reason it is not a model-config read.  A new ``hf.get("x")``, ``text.x``,
``quant["x"]`` or ``getattr(view, "x")`` fails this test: read it with ``typed.attr`` /
``typed.key`` instead (``typed.ANY`` where vLLM takes every value).
"""

from __future__ import annotations

import textwrap

import pytest
from rawreads import raw_reads, scan
from support import REPO

#: modules that may read config objects directly, and why
MODULES = {
    "pipeline/hf/typed.py": "the accessor itself",
    "pipeline/hf/view.py": "the config view's own implementation",
    "pipeline/hf/snapshot.py": "turns the transformers object into the snapshot the view reads",
    "pipeline/hf/_worker.py": "builds the transformers object (worker side)",
    "pipeline/hf/_classes.py": "builds vLLM's config classes (worker side)",
    "pipeline/hf/sources.py": "files, hub constants and OS flags; no config view",
    "pipeline/hf/safetensors_header.py": "safetensors headers; no config view",
    "pipeline/hf/cache.py": "the snapshot cache; reads the transformers module's version",
    "pipeline/logs/facts.py": "a start-up log's text read back; no config view",
    "pipeline/logs/lines.py": "a start-up log's text read back; no config view",
    "pipeline/logs/startlog.py": "a start-up log's text read back; no config view",
}
#: (module, the object read): reads of objects that are not model configs, and why
OBJECTS = {
    ("pipeline/config.py", "self"): "enginecfg's own attrs sections, by field name",
    ("pipeline/config.py", "sec"): "enginecfg's own attrs sections, by field name",
    ("pipeline/config.py", "inst"): "an attrs section's back-reference to its engine config",
    ("pipeline/engine_args.py", "text"): "a command-line string argument, not a config view",
    ("pipeline/loading.py", "exc"): "a JSON decoding exception's message",
    ("pipeline/models/v034/startup.py", "exc"): "a refusal's vLLM exception type, where it names one",
    ("stages/impact.py", "startup"): "the start-up fact (worked out or not), not a model config",
    ("pipeline/models/kv_cache.py", "s"): "KV-cache spec objects compared field by field",
    ("pipeline/models/kv_cache.py", "merged"): "KV-cache spec objects compared field by field",
    ("pipeline/loadmemo.py", "template"): "enginecfg's own engine config, by section name",
    ("pipeline/loadmemo.py", "hf"): "the view's own copy method (clone), not a config field",
    ("pipeline/loadmemo.py", "text"): "the view's identity (anchor), not a config field",
    ("pipeline/loadmemo.py", "cls"): "an attrs section class's slot descriptors, by field name",
    ("pipeline/ordering.py", "st"): "a stage object's name",
    ("pipeline/run.py", "stage"): "a stage object's vLLM step",
    ("pipeline/run.py", "named"): "the caller's impact option (a dict or an ImpactOptions), for its GPU",
    ("pipeline/stage.py", "self._section(section)"): "enginecfg's own attrs section, by field name",
    ("pipeline/stage.py", "self._cfg"): "enginecfg's own engine config, by section name",
    ("pipeline/stage.py", "sec"): "enginecfg's own attrs section, by field name",
    ("pipeline/config.py", "hf"): "the view's identity (anchor), not a config field",
    ("pipeline/config.py", "text"): "the view's identity (anchor), not a config field",
    ("pipeline/models/gpus.py", "text"): "a GPU name as the user typed it, not a config view",
    ("pipeline/models/capacity.py", "self"): "enginecfg's own attrs value, a field's default from another field",
    ("pipeline/stage.py", "text"): "a stage's reason or message, cut to its cap",
    ("pipeline/hf/memo.py", "value"): "a frozen attrs value's own fields, read for its content key",
    ("pipeline/plugin_checks.py", "cfg"): "enginecfg's own engine config, by section name",
    ("pipeline/plugin_checks.py", "sec"): "enginecfg's own attrs section, by field name",
    ("pipeline/releases/options.py", "base"): "the option table composed before, by part name",
    ("stages/v034/config_time.py", "pipeline"): "the pipeline handing a stage its release (a stage kit's may have none)",
    ("stages/v034/config_time.py", "self"): "the stage's own release, where configure set one",
    ("pipeline/timelimit.py", "self.target"): "the stdout a stage's output router stands in for",
    ("pipeline/stage.py", "type(item)"): "a fact a stage recorded, asked whether it turns itself into JSON",
    ("pipeline/jsonvalue.py", "text"): "the text of a CSV cell being escaped, not a config view",
    ("stages/v034/startup.py", "hf"): "a pair of config views compared by identity with the last run's, not read",
}


def _object(expr: str) -> str:
    """The object a reported read reads from (``getattr(X, ...)`` -> X, ``X.get(..)`` -> X)."""
    import ast

    node = ast.parse(expr, mode="eval").body
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return ast.unparse(node.args[0])
    if isinstance(node, ast.Call):
        node = node.func
    return ast.unparse(node.value)


def _unexplained(root) -> list[str]:
    out = []
    for path, reads in scan(root).items():
        if path in MODULES:
            continue
        for line, expr in reads:
            if (path, _object(expr)) not in OBJECTS:
                out.append(f"{path}:{line}: {expr}")
    return out


def test_every_config_read_goes_through_typed():
    assert _unexplained(REPO) == []


def test_the_allow_list_has_no_stale_entries():
    found = scan(REPO)
    for path in MODULES:
        assert (REPO / path).exists(), path
    for path, obj in OBJECTS:
        assert any(_object(expr) == obj for _, expr in found.get(path, [])), (path, obj)


# -- the checker itself: it finds planted reads and lets typed reads and writes pass ----------

@pytest.mark.parametrize("snippet", [
    'x = hf.get("num_attention_heads")',
    'x = text.head_dim',
    'x = cfg.model_config.hf_config.is_causal',
    'x = cfg.model_config.hf_text_config.sliding_window',
    'x = getattr(mc.hf_text_config, "head_dim", None)',
    'x = getattr(anything, name)',
    'x = quant["quant_algo"]',
    'x = quant.get("kv_cache_scheme")',
    'if view.has("patch_size"): pass',
    'x = self.text.num_hidden_layers',
    'x = hf.text_config.layer_types',
    'f(rope.get("factor"))',
])
def test_the_checker_finds_a_planted_read(snippet):
    reads = raw_reads(textwrap.dedent(snippet))
    assert len(reads) == 1 and reads[0][0] == 1, reads


@pytest.mark.parametrize("snippet", [
    'x = typed.attr(hf, "num_attention_heads", typed.INT)',
    'x = typed.key(quant, QUANT_FIELD, "quant_algo", typed.ANY)',
    'text.sliding_window = None',
    'sub = hf.get_text_config()',
    'h = cfg.model_config.hf_config',
    'x = other.get("a")',
])
def test_the_checker_lets_typed_reads_and_writes_pass(snippet):
    assert raw_reads(snippet) == []


def test_a_planted_read_in_a_module_fails_the_check(tmp_path):
    """The whole check, on a copy of a real module with one raw read added."""
    for folder in ("pipeline", "stages"):
        (tmp_path / folder).mkdir()
    source = (REPO / "stages" / "engine_defaults.py").read_text()
    (tmp_path / "stages" / "engine_defaults.py").write_text(
        source + "\n\ndef planted(cfg):\n    return cfg.model_config.hf_config.get('is_causal')\n")
    problems = _unexplained(tmp_path)
    assert len(problems) == 1 and "planted" not in problems[0] and ".get('is_causal')" in problems[0]
