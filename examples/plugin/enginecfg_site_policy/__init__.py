"""A site policy for enginecfg: no model is served with a context longer than the site allows.

Installed, this package adds the stage ``site-max-model-len`` to every enginecfg run
through its entry point in the group ``enginecfg.stages``.  It uses nothing but
enginecfg's public contract (``Stage``, the stage context and the error types).

The cap comes from the environment variable ``SITE_MAX_MODEL_LEN``: a positive integer,
or ``default`` for :data:`DEFAULT_MAX_MODEL_LEN`.  Unset (or empty), there is no policy
and the stage does not apply, so installing the package alone changes no result.
"""

from __future__ import annotations

import os

from enginecfg import InvalidInputError, Stage

__all__ = ["SiteMaxModelLen", "DEFAULT_MAX_MODEL_LEN", "POLICY_ENV", "site_cap"]
__version__ = "0.1.0"

#: the cap ``SITE_MAX_MODEL_LEN=default`` stands for
DEFAULT_MAX_MODEL_LEN = 32768
POLICY_ENV = "SITE_MAX_MODEL_LEN"


def site_cap() -> int | None:
    """The site's cap on max_model_len, or None where no policy is set.

    A value that is not a positive integer is the operator's mistake, reported as one
    (InvalidInputError names the variable, the value and what is allowed) rather than
    silently ignored: a policy that is not enforced is worse than a run that stops.
    """
    raw = os.environ.get(POLICY_ENV, "").strip()
    if not raw:
        return None
    if raw.lower() == "default":
        return DEFAULT_MAX_MODEL_LEN
    try:
        cap = int(raw)
    except ValueError:
        cap = 0
    if cap <= 0:
        raise InvalidInputError.for_value(POLICY_ENV, raw, "a positive integer, or 'default'")
    return cap


class SiteMaxModelLen(Stage):
    """Cap ``model_config.max_model_len`` at the site's limit.

    Ordered after ``pooling`` and before ``mamba-cache-mode``: without prefix caching,
    ``mamba-cache-mode`` sets an unset Mamba block size to max_model_len, and
    ``vllm-checks`` then refuses a Mamba block size that differs from it.  Capping later
    would leave the block at the uncapped length and the run would be rejected.
    """

    name = "site-max-model-len"
    after = ("pooling",)
    before = ("mamba-cache-mode",)

    def applies(self, cfg) -> bool:
        cap = site_cap()
        return cap is not None and cfg.model_config.max_model_len > cap

    def run(self, cfg, ctx) -> None:
        cap = site_cap()
        current = cfg.model_config.max_model_len
        if cfg.engine_args.get("max_model_len") is not None:
            source = f"{current} was requested"
        else:
            source = f"the model's own limit is {current}"
        ctx.set("model_config", "max_model_len", cap, level="WARNING", log=True,
                reason=f"site policy ({POLICY_ENV}) caps max_model_len at {cap}; {source}")
