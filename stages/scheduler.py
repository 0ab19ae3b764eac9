"""``scheduler``: the checks vLLM's scheduler config makes when it is built.

vLLM builds its scheduler config from the engine arguments after the model config (with its
chunked-prefill default) and the cache config; its token budget per step
(``max_num_batched_tokens``) and request limit (``max_num_seqs``) are the caller's or
vLLM's defaults (:mod:`enginecfg.pipeline.models.engine_defaults`).  In vLLM's order:

- both must be at least 1 (only a max_model_len of 0 or below makes the defaults 0);
- without chunked prefill a whole prompt must fit in one step: a budget below max_model_len
  is refused;
- the budget must hold one token per request: not below ``max_num_seqs``;
- a budget over ``max_num_seqs * max_model_len`` is warned about.

This stage changes nothing: the defaults are left unset in the config (vLLM's values are
worked out where they are needed, as the capacity figures do).
"""

from __future__ import annotations

from enginecfg.pipeline.errors import ConfigRejectedError, InvalidInputError
from enginecfg.pipeline.models.engine_defaults import chunked_prefill, max_num_batched_tokens, max_num_seqs
from enginecfg.pipeline.stage import Stage


class SchedulerStage(Stage):
    name = "scheduler"
    vllm_step = "configs"

    def budget(self, cfg) -> tuple[int, int, bool]:
        """The scheduler's token budget, request limit and chunked prefill, as the release
        sets them (the caller's, else its defaults)."""
        return max_num_batched_tokens(cfg), max_num_seqs(cfg), chunked_prefill(cfg)

    def run(self, cfg, ctx) -> None:
        tokens, seqs, max_len = self.check(cfg)
        if tokens > seqs * max_len:
            ctx.warn(f"max_num_batched_tokens ({tokens}) exceeds max_num_seqs * max_model_len "
                     f"({seqs * max_len}). This may lead to unexpected behavior.")

    def check(self, cfg) -> tuple[int, int, int]:
        """The scheduler config's refusals; returns the budget, the request limit and
        max_model_len they were checked with."""
        sc, max_len = cfg.scheduler_config, cfg.model_config.max_model_len
        tokens, seqs, chunked = self.budget(cfg)
        if tokens < 1 or seqs < 1:
            # given values are at least 1 (the engine arguments are checked): these are the
            # defaults vLLM derives from a max_model_len of 0 or below
            derived = [f"{name} = {value}" for name, value, given in (
                ("max_num_batched_tokens", tokens, sc.max_num_batched_tokens),
                ("max_num_seqs", seqs, sc.max_num_seqs)) if given is None and value < 1]
            given = "max_model_len" in (cfg.engine_args or {})
            where = ("--max-model-len" if given else
                     "derived from the model config" + (" as --hf-overrides sets it"
                                                        if (cfg.engine_args or {}).get("hf_overrides") else ""))
            raise InvalidInputError(
                f"invalid max_model_len ({where}): got {max_len}; allowed: "
                f"{'a positive integer, or -1 for the model' + chr(39) + 's maximum' if given else 'a model whose length is a positive integer'}"
                f" (vLLM derives {' and '.join(derived)} from it, which its "
                f"scheduler config refuses: each must be at least 1)", field="max_model_len")
        if tokens < max_len and not chunked:
            raise ConfigRejectedError(
                f"max_num_batched_tokens ({tokens}) is smaller than max_model_len ({max_len}). This "
                f"effectively limits the maximum sequence length to max_num_batched_tokens and makes vLLM "
                f"reject longer sequences. Please increase max_num_batched_tokens or decrease max_model_len.",
                field="scheduler_config.max_num_batched_tokens")
        if tokens < seqs:
            raise ConfigRejectedError(
                f"max_num_batched_tokens ({tokens}) must be greater than or equal to max_num_seqs ({seqs}).",
                field="scheduler_config.max_num_seqs")
        return tokens, seqs, max_len
