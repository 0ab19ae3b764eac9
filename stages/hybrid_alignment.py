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

    def check(self, cfg) -> None:
        """The pages this stage made equal, after something changed them: vLLM's KV-cache
        planning grows a smaller attention page's block to the largest page when it divides
        it, and refuses otherwise; a padded Mamba page below the state it holds fails its
        assertion."""
        if not self.applies(cfg):
            return
        cc = cfg.cache_config
        facts = page_facts(cfg)
        mamba_page, attn1 = facts["mamba_page_size"], facts["attn_page_size_1_token"]
        if mamba_page == 0 or attn1 == 0 or not isinstance(cc.block_size, int) or cc.block_size < 1:
            return
        padded = cc.mamba_page_size_padded
        if padded is not None and padded < mamba_page:
            raise ConfigRejectedError(
                f"the padded Mamba page ({padded} bytes) is smaller than the Mamba state page "
                f"({mamba_page} bytes)", field="cache_config.mamba_page_size_padded", vllm_type="AssertionError")
        pages = {"attention layers": cc.block_size * attn1, "Mamba layers": padded or mamba_page}
        top = max(pages.values())
        for layers, page in pages.items():
            if top % page:
                raise ConfigRejectedError(
                    "The page size of the layer is not divisible by the maximum page size. Cannot "
                    f"unify by adjusting block_size. ({layers}: {page} bytes, largest page: {top} bytes)",
                    field="cache_config.block_size", vllm_type="NotImplementedError")

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
        need = cdiv(mamba_page, attn1)  # tokens of attention KV that hold one Mamba state page
        state = _state_words(facts)
        if cc.mamba_cache_mode == "all":
            given = ctx.original("cache_config", "mamba_block_size")
            base = given or mc.mamba_chunk_size
            base_words = "the Mamba block size you gave" if given else "the Mamba chunk size"
            chunk = math.lcm(base, align)
            attn_block = chunk * cdiv(need, chunk)
            rule = (f"In 'all' mode the block must be a multiple of lcm({base_words} {base}, the "
                    f"kernel alignment {align}) = {chunk} tokens. {state} An attention token takes "
                    f"{attn1:,} bytes, so one page needs ceil({mamba_page:,} / {attn1:,}) = {need:,} "
                    f"tokens; the smallest multiple of {chunk} that is at least {need:,} is "
                    f"{attn_block:,} ({cdiv(need, chunk)} x {chunk} = {attn_block:,}).")
            ctx.set("cache_config", "mamba_block_size", attn_block,
                    reason=f"'all' mode: Mamba blocks of {attn_block} tokens, a multiple of "
                           f"lcm(chunk {base}, alignment {align}) = {chunk} that covers the Mamba page",
                    explanation=rule + f" A Mamba block spans those {attn_block:,} tokens.")
        else:
            attn_block = align * cdiv(mamba_page, align * attn1)
            rule = (f"{state} An attention token takes {attn1:,} bytes, so one page needs "
                    f"ceil({mamba_page:,} / {attn1:,}) = {need:,} tokens; the smallest multiple of "
                    f"the kernel alignment {align} that is at least {need:,} is {attn_block:,} "
                    f"({cdiv(need, align)} x {align} = {attn_block:,}).")
        if cc.block_size < attn_block:
            ctx.set("cache_config", "block_size", attn_block, log=True,
                    reason=f"Setting attention block size to {attn_block} tokens to ensure that attention "
                           f"page size is >= mamba page size.",
                    explanation=f"{rule} The block size {cc.block_size} was smaller, so it becomes "
                                f"{attn_block:,}: {attn_block:,} x {attn1:,} = "
                                f"{attn_block * attn1:,} bytes per attention page.")
        if cc.mamba_cache_mode == "align":
            ctx.set("cache_config", "mamba_block_size", cc.block_size,
                    reason=f"'align' mode: the Mamba block size equals the block size ({cc.block_size})",
                    explanation=f"In 'align' mode a Mamba block is exactly one attention block: "
                                f"{cc.block_size:,} tokens.")
        attn_page = cc.block_size * attn1
        if attn_page == mamba_page:
            return
        if cc.mamba_page_size_padded is None or cc.mamba_page_size_padded != attn_page:
            pct = 100 * (attn_page - mamba_page) / mamba_page
            ctx.set("cache_config", "mamba_page_size_padded", attn_page, log=True,
                    reason=f"Padding mamba page size by {pct:.2f}% to ensure that mamba page size and "
                           f"attention page size are exactly equal.",
                    explanation=f"Pages of both kinds share one pool, so they must be the same size. "
                                f"The attention page is {cc.block_size:,} x {attn1:,} = "
                                f"{attn_page:,} bytes and the Mamba state page {mamba_page:,} bytes; "
                                f"the Mamba page is padded by {attn_page:,} - {mamba_page:,} = "
                                f"{attn_page - mamba_page:,} bytes ({pct:.2f}% of {mamba_page:,}).")


def _state_words(facts: dict) -> str:
    """'One Mamba state page is N bytes (128x64 bfloat16 + ...).'"""
    parts = " + ".join(f"{'x'.join(map(str, shape))} {dtype}"
                       for shape, dtype in zip(facts["mamba_state_shapes"], facts["mamba_state_dtypes"]))
    return f"One Mamba state page is {facts['mamba_page_size']:,} bytes ({parts})."
