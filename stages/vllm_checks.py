"""``vllm-checks``: the checks vLLM runs right after the verification steps.

In vLLM's order: attention heads divisible by the tensor-parallel size; the ModelOpt
quantization config's own parse (with vLLM's warning that the format is experimental); the
resolved dtype supported by the checkpoint's quantization method; and ``--mamba-block-size``
only with prefix caching (unless it equals max_model_len).
"""

from __future__ import annotations

from enginecfg.pipeline.errors import ConfigRejectedError
from enginecfg.pipeline.models.derive import QUANTIZATION_DTYPES
from enginecfg.pipeline.models.quant import check_modelopt
from enginecfg.pipeline.stage import Stage


class VllmChecksStage(Stage):
    name = "vllm-checks"
    vllm_step = "post"

    def run(self, cfg, ctx) -> None:
        self._check_heads(cfg)
        for warning in check_modelopt(cfg.model_config.hf_config, cfg.model_config.quantization):
            ctx.warn(warning)
        self._check_after_quantization(cfg)

    def check(self, cfg) -> None:
        self._check_heads(cfg)
        self._check_after_quantization(cfg)

    @staticmethod
    def _check_heads(cfg) -> None:
        tp = cfg.parallel_config.tensor_parallel_size
        heads = cfg.model_config.num_attention_heads
        if heads is not None and heads % tp != 0:
            raise ConfigRejectedError(
                f"Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp}).",
                field="parallel_config.tensor_parallel_size")

    @staticmethod
    def _check_after_quantization(cfg) -> None:
        mc, cc = cfg.model_config, cfg.cache_config
        supported = QUANTIZATION_DTYPES.get(mc.quantization or "")
        if supported is not None and mc.dtype not in supported:
            listed = ", ".join(f"torch.{d}" for d in supported)
            raise ConfigRejectedError(
                f"torch.{mc.dtype} is not supported for quantization method {mc.quantization}. "
                f"Supported dtypes: [{listed}]", field="model_config.dtype")
        if cc.mamba_block_size is not None and cc.mamba_block_size != mc.max_model_len \
                and not cc.enable_prefix_caching:
            raise ConfigRejectedError("--mamba-block-size can only be set with --enable-prefix-caching",
                                      field="cache_config.mamba_block_size")
