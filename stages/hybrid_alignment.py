"""``hybrid-alignment``: make one attention page hold one Mamba state page.

Hybrid models keep attention KV blocks and Mamba states in one pool of equal pages.  The
attention block size is grown to the smallest multiple of the kernel alignment (16; 64 or
128 for MLA) whose page covers the Mamba state page — or, in the ``all`` cache mode, to a
multiple of the Mamba chunk size — even over a block size the caller set; then the Mamba
page is padded to exactly the attention page.  The page facts are published as ``pages``.
"""

from __future__ import annotations

import math

from enginecfg.pipeline.models.pages import page_facts
from enginecfg.pipeline.errors import ConfigRejectedError
from enginecfg.pipeline.stage import Stage
from enginecfg.stages._common import cdiv


class HybridAlignmentStage(Stage):
    name = "hybrid-alignment"
    facts = ("pages",)

    def applies(self, cfg) -> bool:
        return cfg.model_config.is_hybrid

    def run(self, cfg, ctx) -> None:
        cc, mc = cfg.cache_config, cfg.model_config
        facts = page_facts(cfg)
        ctx.record("pages", facts)
        mamba_page = facts["mamba_page_size"]
        attn1 = facts["attn_page_size_1_token"]
        align = facts["kernel_block_alignment_size"]
        if mamba_page == 0:
            return
        if attn1 == 0:
            raise ConfigRejectedError(
                f"attention page size per token is 0 (head_size={mc.head_size}, num_kv_heads="
                f"{mc.num_kv_heads}): no attention block can hold the Mamba state of {mamba_page} bytes",
                field="model_config.head_size", vllm_type="ZeroDivisionError")
        if cc.mamba_cache_mode == "all":
            base = ctx.original("cache_config", "mamba_block_size") or mc.mamba_chunk_size
            chunk = math.lcm(base, align)
            attn_block = chunk * cdiv(cdiv(mamba_page, attn1), chunk)
            ctx.set("cache_config", "mamba_block_size", attn_block,
                    reason=f"'all' mode: Mamba blocks of {attn_block} tokens, a multiple of "
                           f"lcm(chunk {base}, alignment {align}) = {chunk} that covers the Mamba page")
        else:
            attn_block = align * cdiv(mamba_page, align * attn1)
        if cc.block_size < attn_block:
            ctx.set("cache_config", "block_size", attn_block, log=True,
                    reason=f"Setting attention block size to {attn_block} tokens to ensure that attention "
                           f"page size is >= mamba page size.")
        if cc.mamba_cache_mode == "align":
            ctx.set("cache_config", "mamba_block_size", cc.block_size,
                    reason=f"'align' mode: the Mamba block size equals the block size ({cc.block_size})")
        attn_page = cc.block_size * attn1
        if attn_page == mamba_page:
            return
        if cc.mamba_page_size_padded is None or cc.mamba_page_size_padded != attn_page:
            pct = 100 * (attn_page - mamba_page) / mamba_page
            ctx.set("cache_config", "mamba_page_size_padded", attn_page, log=True,
                    reason=f"Padding mamba page size by {pct:.2f}% to ensure that mamba page size and "
                           f"attention page size are exactly equal.")
