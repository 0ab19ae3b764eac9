"""The page facts of a resolved config: what one attention page and one Mamba state page hold.

Hybrid alignment sizes the attention block from these; GPU validation lays the page out with
them; the run document publishes them as ``pages`` (the fixtures' ``pages``).
"""

from __future__ import annotations

from typing import Any

from enginecfg.pipeline.hf import ContentMemo, memoised
from enginecfg.pipeline.models import mamba_state
from enginecfg.pipeline.models.dtypes import attention_kv_dtype

__all__ = ["PAGES", "page_facts"]

#: the page facts of configs seen before in this process (a pure function of the config)
PAGES = ContentMemo(maxsize=256)


@memoised(PAGES)
def page_facts(cfg: Any) -> dict[str, Any]:
    """The attention and Mamba page sizes this config implies (before padding)."""
    mc, cc = cfg.model_config, cfg.cache_config
    kv_dtype = attention_kv_dtype(cc.cache_dtype, mc.dtype)
    align = mamba_state.kernel_block_alignment(mc.use_mla, cfg.attention_config.backend)
    attn1 = mamba_state.attention_page_size_1_token(mc.use_mla, mc.num_kv_heads, mc.head_size, kv_dtype)
    tp = cfg.parallel_config.tensor_parallel_size
    # vLLM builds the shapes first, but a shape it cannot compute only fails later, when the
    # page size multiplies it out (MiniMax without head_dim), so the dtypes' refusal ("fp32
    # state for minimax ...") is what it reports first: the same order here
    dtypes = mamba_state.state_dtypes(mc.arch_info, mc.dtype, cc.mamba_cache_dtype, cc.mamba_ssm_cache_dtype)
    shapes = mamba_state.state_shapes(mc.arch_info, mc.hf_config, mc.hf_text_config, tp)
    return {
        "attn_page_size_1_token": attn1,
        "kernel_block_alignment_size": align,
        "mamba_page_size": mamba_state.page_size(shapes, dtypes),
        "mamba_state_shapes": [list(s) for s in shapes],
        "mamba_state_dtypes": list(dtypes),
        "attention_kv_dtype": kv_dtype,
    }
