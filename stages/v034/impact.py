"""``impact`` for vLLM 0.34.0: the KV-cache figures with 0.34.0's planning (RULES.md K1-K7).

The same stage, options and fact as 0.19.0's (:mod:`enginecfg.stages.impact`); the figures
come from :mod:`enginecfg.pipeline.models.v034.kv_planning` at the start-up decisions the
``startup`` fact holds: groups of one type merged, ``kv_tokens`` = int(concurrency x
max_model_len), concurrency counting every group's blocks, vLLM 0.34.0's not-enough-memory
text.  Without ``--gpu-memory-utilization`` the estimate takes vLLM 0.34.0's default, 1.0
(the extensible KV cache); ``kv_cache_memory`` is ``--kv-cache-memory-bytes``, which turns
the extensible KV cache off (and so picks the other hint of the text);
``num_gpu_blocks_override`` is ``--num-gpu-blocks-override``: 0.34.0 plans with the override's
blocks from the start, its start-up check included (0.19.0 checks the memory first), and keeps
the extensible KV cache off (so the utilization defaults to 0.92, and the text's other hint).
"""

from __future__ import annotations

from enginecfg.pipeline.errors import EngineCfgError
from enginecfg.pipeline.hf import Unkeyable
from enginecfg.pipeline.models.capacity import ImpactUnavailable
from enginecfg.pipeline.models.startup import Startup, StartupUnavailable
from enginecfg.pipeline.models.v034 import kv_planning
from enginecfg.pipeline.releases import in_force
from enginecfg.stages.impact import ImpactStage, with_start_verdict


#: vLLM 0.34.0's gpu_memory_utilization when the extensible KV cache is off (RULES.md C3.4)
NON_EXTENSIBLE_UTILIZATION = 0.92
#: the default before rule C3.4a
EARLIER_UTILIZATION = 0.9


def _wording(release) -> str:
    """The latest not-enough-memory wording rule in force (K7b, K7a; "" for 0.19.0's)."""
    if in_force(release, "K7b"):
        return "K7b"
    return "K7a" if release.has("K7a") else ""


#: the memo key of the figures' options last taken, with what it was taken for: ``(startup
#: fact, release, impact options, utilization given, key)``.  All but the flag are frozen
#: values held here (the start-up fact is the one the plan memo hands every run of a config
#: content, the default options one value), so the very same objects mean the same options;
#: one slot, replaced whole
_OPTIONS_KEY: list[tuple] = [(None,) * 5]


class Impact034Stage(ImpactStage):

    def __init__(self) -> None:
        super().__init__()
        self.utilization_given = False

    def configure(self, pipeline) -> None:
        super().configure(pipeline)
        raw = pipeline.options_for(self.name)
        self.utilization_given = raw is not None and (not isinstance(raw, dict) or "gpu_memory_utilization" in raw)

    def run(self, cfg, ctx) -> None:
        startup = ctx.fact("startup")
        if isinstance(startup, StartupUnavailable):
            ctx.record("impact", with_start_verdict(ImpactUnavailable(
                f"the start-up step was not worked out: {startup.error}", startup.field), startup))
            return
        if not isinstance(startup, Startup):
            ctx.record("impact", ImpactUnavailable("the start-up step was not decided (engine-start did not run)"))
            return
        opts = self.options
        # C3.4b: the extensible KV cache, off when the KV cache is sized by a flag
        # (--kv-cache-memory-bytes, --num-gpu-blocks-override); without it the utilization
        # defaults to 0.92 (C3.4a), and before C3.4a to 0.9
        release = ctx.release
        extensible = in_force(release, "C3.4b") and opts.kv_cache_memory is None \
            and opts.num_gpu_blocks_override is None
        default_utilization = 1.0 if extensible else (
            NON_EXTENSIBLE_UTILIZATION if in_force(release, "C3.4a") else EARLIER_UTILIZATION)
        try:
            options = dict(
                startup=kv_planning.startup_key(startup), gpu=kv_planning.gpu_key(opts.card),
                gpu_memory_gib=opts.card.memory_gib,
                gpu_memory_utilization=opts.gpu_memory_utilization if self.utilization_given else default_utilization,
                kv_cache_memory=opts.kv_cache_memory, contexts=opts.contexts,
                extensible=extensible, num_gpu_blocks_override=opts.num_gpu_blocks_override,
                estimate_cudagraphs=opts.estimate_cudagraphs, enforce_eager=opts.enforce_eager,
                wording=_wording(release))
            held = (startup, release, opts, self.utilization_given)
            known = _OPTIONS_KEY[0]
            if all(a is b for a, b in zip(known[:4], held)):
                key = known[4]
            else:
                try:
                    key = kv_planning.impact.options_key(**options)
                except Unkeyable:
                    key = None
                _OPTIONS_KEY[0] = (*held, key) if key is not None else (None,) * 5
            figures = (kv_planning.impact(cfg, **options) if key is None
                       else kv_planning.impact.keyed(cfg, key, **options))
        except EngineCfgError as exc:
            figures = ImpactUnavailable(str(exc), exc.field)
        except (ArithmeticError, TypeError, ValueError, KeyError, IndexError) as exc:
            figures = ImpactUnavailable(f"the KV-cache figures could not be computed: {type(exc).__name__}: {exc}")
        # (0.34.0 sizes the KV cache from the memory it finds free: no worker memory check first)
        ctx.record("impact", with_start_verdict(figures, startup))
