"""``gemma4-backend``: one attention backend for Gemma 4's two head sizes.

Gemma 4 variants whose sliding-window layers (``head_dim``) and full-attention layers
(``global_head_dim``) differ, with the larger above 256, exceed FlashAttention's head-size
limit on some layers only; vLLM would then mix backends per layer, which diverges
numerically.  Unless the caller chose a backend, TRITON_ATTN (no head-size ceiling) is
forced for every layer.
"""

from __future__ import annotations

from enginecfg.pipeline.models.derive import gemma4_head_dims
from enginecfg.pipeline.stage import Stage
from enginecfg.stages._common import config_hook


class Gemma4BackendStage(Stage):
    name = "gemma4-backend"

    def applies(self, cfg) -> bool:
        return config_hook(cfg) == "gemma4"

    def run(self, cfg, ctx) -> None:
        text = cfg.model_config.hf_text_config
        head_dim, global_head_dim = gemma4_head_dims(text, absent=None)
        if head_dim is None or global_head_dim is None or head_dim == global_head_dim:
            return
        if max(head_dim or 0, global_head_dim or 0) <= 256 or cfg.attention_config.backend is not None:
            return
        ctx.set("attention_config", "backend", "TRITON_ATTN", log=True,
                reason=f"Gemma4 model has heterogeneous head dimensions (head_dim={int(head_dim)}, "
                       f"global_head_dim={int(global_head_dim)}). Forcing TRITON_ATTN backend to prevent "
                       f"mixed-backend numerical divergence.",
                explanation=f"The sliding-window layers have head_dim {int(head_dim)} and the global "
                            f"layers {int(global_head_dim)}; the larger, "
                            f"{int(max(head_dim, global_head_dim))}, is over 256 and no attention "
                            f"backend was given, so every layer uses TRITON_ATTN.")
