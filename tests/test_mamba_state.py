"""Mamba state shapes, dtypes and page sizes, against numbers worked out by hand.

Each architecture of the table with a state is checked at tensor-parallel sizes 1, 2, 4
and 8.  Inputs are written out as SimpleNamespace "hf views"; the comments show the
arithmetic.  Unless a case says otherwise, pages use the dtypes of ``mamba_cache_dtype``
"auto" on a bfloat16 model (2 bytes each); cases marked "ssm fp32" take the float32 SSM
state that their checkpoint asks for (NemotronH ``mamba_ssm_cache_dtype``, Qwen3.5
``mamba_ssm_dtype``).  A second group of tests replays the fixtures' recorded pages.
"""

from __future__ import annotations

import json
from types import SimpleNamespace as NS

import pytest

from support import FIXTURES

from enginecfg.pipeline.models.architectures import ARCHITECTURES, lookup
from enginecfg.pipeline.models.dtypes import attention_kv_dtype
from enginecfg.pipeline.errors import ConfigRejectedError, InvalidInputError
from enginecfg.pipeline.models.mamba_state import (
    attention_page_size_1_token,
    extra_groups_for_head_shards,
    kernel_block_alignment,
    mamba2_state_shape,
    mamba_chunk_size,
    page_size,
    state_dtypes,
    state_shapes,
)


# ---------------------------------------------------------------------------------------
# Hand-built views
# ---------------------------------------------------------------------------------------

# nemotron-3-nano-30b-a3b (published config.json): mamba heads 64 x head dim 64, 8 groups,
# state 128, kernel 4, ssm state float32.
NEMOTRON_NANO = NS(model_type="nemotron_h", mamba_num_heads=64, mamba_head_dim=64, n_groups=8,
                   ssm_state_size=128, conv_kernel=4, mamba_ssm_cache_dtype="float32")
# nemotron-3-super-120b-a12b (published): 128 heads x 64, 8 groups, state 128.
NEMOTRON_SUPER = NS(model_type="nemotron_h", mamba_num_heads=128, mamba_head_dim=64, n_groups=8,
                    ssm_state_size=128, conv_kernel=4)
# nemotron-h-56b-base-8k fields (published), as the text config of a Nano-VL model.
NEMOTRON_56B = NS(model_type="nemotron_h", mamba_num_heads=256, mamba_head_dim=64, n_groups=8,
                  ssm_state_size=256, conv_kernel=4)
# BambaConfig() defaults (bamba-default fixture).
BAMBA = NS(model_type="bamba", hidden_size=4096, mamba_expand=2, mamba_n_heads=128,
           mamba_d_head=64, mamba_n_groups=1, mamba_d_state=256, mamba_d_conv=4)
# FalconH1Config() defaults (falcon-h1-default fixture; transformers 5.23 sets the head dim
# to mamba_d_ssm // heads = 1024 // 128 = 8).
FALCON_H1 = NS(model_type="falcon_h1", hidden_size=4096, mamba_expand=2, mamba_d_ssm=1024,
               mamba_n_heads=128, mamba_d_head=8, mamba_n_groups=1, mamba_d_state=256,
               mamba_d_conv=4)
# GraniteMoeHybridConfig() defaults with the head dim still "auto" (8192 // 128 = 64).
GRANITE = NS(model_type="granitemoehybrid", hidden_size=4096, mamba_expand=2, mamba_n_heads=128,
             mamba_d_head="auto", mamba_n_groups=1, mamba_d_state=256, mamba_d_conv=4)
# Zamba2Config() defaults (zamba2-default fixture): headdim 640 = 2*2560 // 8.
ZAMBA2 = NS(model_type="zamba2", hidden_size=2560, mamba_expand=2, mamba_ngroups=1,
            n_mamba_heads=8, mamba_headdim=640, mamba_d_state=64, mamba_d_conv=4)
# PLaMo2 (remote-code config, defaults outside vLLM): an illustrative 32 x 128 layout.
PLAMO2 = NS(model_type="plamo2", mamba_num_heads=32, hidden_size_per_head=128, mamba_d_state=64,
            mamba_d_conv=4)
# jamba-1.5-mini (published) = JambaConfig() defaults for these fields.
JAMBA = NS(model_type="jamba", hidden_size=4096, mamba_expand=2, mamba_d_state=16, mamba_d_conv=4)
# qwen3-next-80b-a3b-thinking (published).
QWEN3_NEXT = NS(model_type="qwen3_next", linear_num_key_heads=16, linear_num_value_heads=32,
                linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4)
# qwen3.5-27b text_config (published), ssm fp32.
QWEN35_27B_TEXT = NS(model_type="qwen3_5_text", linear_num_key_heads=16, linear_num_value_heads=48,
                     linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
                     mamba_ssm_dtype="float32")
# qwen3.5-397b-a17b text_config (published), ssm fp32.
QWEN35_397B_TEXT = NS(model_type="qwen3_5_moe_text", linear_num_key_heads=16,
                      linear_num_value_heads=64, linear_key_head_dim=128,
                      linear_value_head_dim=128, linear_conv_kernel_dim=4)
# qwen3.5-35b-a3b text_config (published), used for ColQwen3_5, ssm fp32.
QWEN35_35B_TEXT = NS(model_type="qwen3_5_moe_text", linear_num_key_heads=16,
                     linear_num_value_heads=32, linear_key_head_dim=128,
                     linear_value_head_dim=128, linear_conv_kernel_dim=4)
# OlmoHybridConfig() defaults (olmo-hybrid-default fixture): 30 heads, dk = 0.75*3840/30 = 96,
# dv = 2*96 = 192.
OLMO = NS(model_type="olmo_hybrid", linear_num_key_heads=30, linear_num_value_heads=30,
          linear_key_head_dim=96, linear_value_head_dim=192, linear_conv_kernel_dim=4)
# Kimi-Linear (registered KimiLinearConfig; linear_attn_config is a plain dict).
KIMI = NS(model_type="kimi_linear",
          linear_attn_config={"num_heads": 32, "head_dim": 128, "short_conv_kernel_size": 4})
# LFM2-1.2B-like: hidden 2048, conv_dim 2048, conv_L_cache 3.
LFM2 = NS(model_type="lfm2", hidden_size=2048, conv_dim=2048, conv_L_cache=3)
# LFM2-350M-like, for ColBERT.
LFM2_SMALL = NS(model_type="lfm2", hidden_size=1024, conv_dim=1024, conv_L_cache=3)
# vLLM Lfm2MoeConfig() defaults; a conv_dim is present to show it is not the one read.
LFM2_MOE = NS(model_type="lfm2_moe", hidden_size=2048, conv_dim=999, conv_L_cache=3)
# Lfm2VlConfig(): text_config = Lfm2Config() (hidden 2560, conv_L_cache 3); the top-level
# hidden_size is a decoy.
LFM2_VL = NS(model_type="lfm2_vl", hidden_size=7,
             text_config=NS(model_type="lfm2", hidden_size=2560, conv_L_cache=3))
# MiniMax-Text-01 (remote code): 64 heads, head_dim 128.
MINIMAX_TEXT01 = NS(model_type="minimax_text_01", num_attention_heads=64, head_dim=128)
# MiniMaxConfig() defaults with head_dim given in config.json.
MINIMAX = NS(model_type="minimax", num_attention_heads=32, head_dim=128)
# Bailing V2.5 (remote code): no head_dim attribute, so hidden // heads = 2048 // 16 = 128.
BAILING = NS(model_type="bailing_hybrid", num_attention_heads=16, hidden_size=2048)
# mamba-130m-hf (published).
MAMBA_130M = NS(model_type="mamba", hidden_size=768, intermediate_size=1536, state_size=16,
                conv_kernel=4)
# falcon-mamba-7b: intermediate 8192, state 16, kernel 4.
FALCON_MAMBA = NS(model_type="falcon_mamba", hidden_size=4096, intermediate_size=8192,
                  state_size=16, conv_kernel=4)
# mamba-codestral-7b-v0.1 (published): expand*hidden = 2*4096 = 8192 (intermediate_size is
# not what vLLM reads), 8 groups, 128 heads x 64, state 128.
CODESTRAL = NS(model_type="mamba2", hidden_size=4096, expand=2, intermediate_size=1,
               n_groups=8, num_heads=128, head_dim=64, state_size=128, conv_kernel=4)

BF16 = ("bfloat16", "auto", "auto")
SSM32 = ("bfloat16", "auto", "float32")

# arch, hf_config, hf_text_config, dtype args, {tp: (shapes, page) | error text}
CASES = [
    ("NemotronHForCausalLM", NEMOTRON_NANO, None, SSM32, {
        # I = 64*64 = 4096; conv_dim = 4096 + 2*8*128 = 6144 (8 groups divide every tp)
        # tp1: 3*6144*2 = 36864 + 64*64*128*4 = 2097152 -> 2134016
        1: (((3, 6144), (64, 64, 128)), 2134016),
        # tp2: 3*3072*2 = 18432 + 32*64*128*4 = 1048576 -> 1067008
        2: (((3, 3072), (32, 64, 128)), 1067008),
        # tp4: 3*1536*2 = 9216 + 16*64*128*4 = 524288 -> 533504
        4: (((3, 1536), (16, 64, 128)), 533504),
        # tp8: 3*768*2 = 4608 + 8*64*128*4 = 262144 -> 266752
        8: (((3, 768), (8, 64, 128)), 266752),
    }),
    ("NemotronHPuzzleForCausalLM", NEMOTRON_SUPER, None, SSM32, {
        # I = 128*64 = 8192; conv_dim = 8192 + 2*8*128 = 10240
        # tp1: 3*10240*2 = 61440 + 128*64*128*4 = 4194304 -> 4255744
        1: (((3, 10240), (128, 64, 128)), 4255744),
        # tp2: 30720 + 2097152 = 2127872
        2: (((3, 5120), (64, 64, 128)), 2127872),
        # tp4: 15360 + 1048576 = 1063936
        4: (((3, 2560), (32, 64, 128)), 1063936),
        # tp8: 7680 + 524288 = 531968
        8: (((3, 1280), (16, 64, 128)), 531968),
    }),
    ("NemotronH_Nano_VL_V2", NS(model_type="NemotronH_Nano_VL_V2", text_config=NEMOTRON_56B),
     None, BF16, {
        # reads hf_config.text_config; I = 256*64 = 16384; conv_dim = 16384 + 2*8*256 = 20480
        # tp1: 3*20480*2 = 122880 + 256*64*256*2 = 8388608 -> 8511488
        1: (((3, 20480), (256, 64, 256)), 8511488),
        # tp2: 61440 + 4194304 = 4255744
        2: (((3, 10240), (128, 64, 256)), 4255744),
        # tp4: 30720 + 2097152 = 2127872
        4: (((3, 5120), (64, 64, 256)), 2127872),
        # tp8: 15360 + 1048576 = 1063936
        8: (((3, 2560), (32, 64, 256)), 1063936),
    }),
    ("BambaForCausalLM", BAMBA, None, BF16, {
        # I = 2*4096 = 8192; g' = 1 at tp1 -> conv_dim 8192 + 2*1*256 = 8704
        # tp1: 3*8704*2 = 52224 + 128*64*256*2 = 4194304 -> 4246528
        1: (((3, 8704), (128, 64, 256)), 4246528),
        # tp2: g' = 1 + (2-1) = 2 -> 8192 + 1024 = 9216 / 2 = 4608; 27648 + 2097152 = 2124800
        2: (((3, 4608), (64, 64, 256)), 2124800),
        # tp4: g' = 4 -> 8192 + 2048 = 10240 / 4 = 2560; 15360 + 1048576 = 1063936
        4: (((3, 2560), (32, 64, 256)), 1063936),
        # tp8: g' = 8 -> 8192 + 4096 = 12288 / 8 = 1536; 9216 + 524288 = 533504
        8: (((3, 1536), (16, 64, 256)), 533504),
    }),
    ("FalconH1ForCausalLM", FALCON_H1, None, BF16, {
        # I = mamba_d_ssm = 1024; tp1 g' 1 -> 1024 + 512 = 1536
        # tp1: 3*1536*2 = 9216 + 128*8*256*2 = 524288 -> 533504
        1: (((3, 1536), (128, 8, 256)), 533504),
        # tp2: g' 2 -> 1024 + 1024 = 2048 / 2 = 1024; 6144 + 262144 = 268288
        2: (((3, 1024), (64, 8, 256)), 268288),
        # tp4: g' 4 -> 1024 + 2048 = 3072 / 4 = 768; 4608 + 131072 = 135680
        4: (((3, 768), (32, 8, 256)), 135680),
        # tp8: g' 8 -> 1024 + 4096 = 5120 / 8 = 640; 3840 + 65536 = 69376
        8: (((3, 640), (16, 8, 256)), 69376),
    }),
    ("GraniteMoeHybridForCausalLM", GRANITE, None, BF16, {
        # same numbers as Bamba: I 8192, head dim "auto" -> 8192 // 128 = 64
        1: (((3, 8704), (128, 64, 256)), 4246528),
        2: (((3, 4608), (64, 64, 256)), 2124800),
        4: (((3, 2560), (32, 64, 256)), 1063936),
        8: (((3, 1536), (16, 64, 256)), 533504),
    }),
    ("Zamba2ForCausalLM", ZAMBA2, None, BF16, {
        # I = 2*2560 = 5120; tp1 g' 1 -> 5120 + 2*64 = 5248
        # tp1: 3*5248*2 = 31488 + 8*640*64*2 = 655360 -> 686848
        1: (((3, 5248), (8, 640, 64)), 686848),
        # tp2: g' 2 -> 5120 + 256 = 5376 / 2 = 2688; 16128 + 327680 = 343808
        2: (((3, 2688), (4, 640, 64)), 343808),
        # tp4: g' 4 -> 5120 + 512 = 5632 / 4 = 1408; 8448 + 163840 = 172288
        4: (((3, 1408), (2, 640, 64)), 172288),
        # tp8: g' 8 -> 5120 + 1024 = 6144 / 8 = 768; 4608 + 81920 = 86528
        8: (((3, 768), (1, 640, 64)), 86528),
    }),
    ("Plamo2ForCausalLM", PLAMO2, None, BF16, {
        # I = 32*128 = 4096; n_groups is 0, so g' = 0 and conv_dim = 4096
        # tp1: 3*4096*2 = 24576 + 32*128*64*2 = 524288 -> 548864
        1: (((3, 4096), (32, 128, 64)), 548864),
        # tp2: 12288 + 262144 = 274432
        2: (((3, 2048), (16, 128, 64)), 274432),
        # tp4: 6144 + 131072 = 137216
        4: (((3, 1024), (8, 128, 64)), 137216),
        # tp8: 3072 + 65536 = 68608
        8: (((3, 512), (4, 128, 64)), 68608),
    }),
    ("JambaForCausalLM", JAMBA, None, BF16, {
        # mamba1: I = 2*4096 = 8192; conv (3, I/tp), temporal (I/tp, 16)
        # tp1: 3*8192*2 = 49152 + 8192*16*2 = 262144 -> 311296
        1: (((3, 8192), (8192, 16)), 311296),
        # tp2: 24576 + 131072 = 155648
        2: (((3, 4096), (4096, 16)), 155648),
        # tp4: 12288 + 65536 = 77824
        4: (((3, 2048), (2048, 16)), 77824),
        # tp8: 6144 + 32768 = 38912
        8: (((3, 1024), (1024, 16)), 38912),
    }),
    ("JambaForSequenceClassification", JAMBA, None, BF16, {
        1: (((3, 8192), (8192, 16)), 311296),
        2: (((3, 4096), (4096, 16)), 155648),
        4: (((3, 2048), (2048, 16)), 77824),
        8: (((3, 1024), (1024, 16)), 38912),
    }),
    ("Qwen3NextForCausalLM", None, QWEN3_NEXT, BF16, {
        # conv_dim = 2*128*16 + 128*32 = 8192
        # tp1: 3*8192*2 = 49152 + 32*128*128*2 = 1048576 -> 1097728
        1: (((3, 8192), (32, 128, 128)), 1097728),
        # tp2: 24576 + 524288 = 548864
        2: (((3, 4096), (16, 128, 128)), 548864),
        # tp4: 12288 + 262144 = 274432
        4: (((3, 2048), (8, 128, 128)), 274432),
        # tp8: 6144 + 131072 = 137216
        8: (((3, 1024), (4, 128, 128)), 137216),
    }),
    ("Qwen3_5ForConditionalGeneration", NS(model_type="qwen3_5"), QWEN35_27B_TEXT, SSM32, {
        # conv_dim = 2*128*16 + 128*48 = 10240
        # tp1: 3*10240*2 = 61440 + 48*128*128*4 = 3145728 -> 3207168
        1: (((3, 10240), (48, 128, 128)), 3207168),
        # tp2: 30720 + 1572864 = 1603584
        2: (((3, 5120), (24, 128, 128)), 1603584),
        # tp4: 15360 + 786432 = 801792
        4: (((3, 2560), (12, 128, 128)), 801792),
        # tp8: 7680 + 393216 = 400896
        8: (((3, 1280), (6, 128, 128)), 400896),
    }),
    ("Qwen3_5MoeForConditionalGeneration", NS(model_type="qwen3_5_moe"), QWEN35_397B_TEXT, SSM32, {
        # conv_dim = 2*128*16 + 128*64 = 12288
        # tp1: 3*12288*2 = 73728 + 64*128*128*4 = 4194304 -> 4268032
        1: (((3, 12288), (64, 128, 128)), 4268032),
        # tp2: 36864 + 2097152 = 2134016
        2: (((3, 6144), (32, 128, 128)), 2134016),
        # tp4: 18432 + 1048576 = 1067008
        4: (((3, 3072), (16, 128, 128)), 1067008),
        # tp8: 9216 + 524288 = 533504
        8: (((3, 1536), (8, 128, 128)), 533504),
    }),
    ("ColQwen3_5", NS(model_type="qwen3_5"), QWEN35_35B_TEXT, SSM32, {
        # conv_dim = 4096 + 128*32 = 8192
        # tp1: 49152 + 32*128*128*4 = 2097152 -> 2146304
        1: (((3, 8192), (32, 128, 128)), 2146304),
        # tp2: 24576 + 1048576 = 1073152
        2: (((3, 4096), (16, 128, 128)), 1073152),
        # tp4: 12288 + 524288 = 536576
        4: (((3, 2048), (8, 128, 128)), 536576),
        # tp8: 6144 + 262144 = 268288
        8: (((3, 1024), (4, 128, 128)), 268288),
    }),
    ("OlmoHybridForCausalLM", OLMO, None, BF16, {
        # conv_dim = 2*96*30 + 192*30 = 11520
        # tp1: 3*11520*2 = 69120 + 30*192*96*2 = 1105920 -> 1175040
        1: (((3, 11520), (30, 192, 96)), 1175040),
        # tp2: 34560 + 552960 = 587520
        2: (((3, 5760), (15, 192, 96)), 587520),
        # tp4: the conv width divides (2880) but 30 value heads do not
        4: "30 is not divisible by 4",
        # tp8: 11520 / 8 = 1440, then 30 / 8 fails
        8: "30 is not divisible by 8",
    }),
    ("KimiLinearForCausalLM", KIMI, None, ("bfloat16", "auto", "auto"), {
        # H*D = 32*128 = 4096; q-conv, k-conv, k-conv (3, 4096/tp); recurrent (32/tp, 128, 128) fp32
        # tp1: 3 * (3*4096*2 = 24576) = 73728 + 32*128*128*4 = 2097152 -> 2170880
        1: (((3, 4096), (3, 4096), (3, 4096), (32, 128, 128)), 2170880),
        # tp2: 3*12288 = 36864 + 1048576 = 1085440
        2: (((3, 2048), (3, 2048), (3, 2048), (16, 128, 128)), 1085440),
        # tp4: 3*6144 = 18432 + 524288 = 542720
        4: (((3, 1024), (3, 1024), (3, 1024), (8, 128, 128)), 542720),
        # tp8: 3*3072 = 9216 + 262144 = 271360
        8: (((3, 512), (3, 512), (3, 512), (4, 128, 128)), 271360),
    }),
    ("Lfm2ForCausalLM", LFM2, None, BF16, {
        # short conv: (conv_L_cache - 1, conv_dim / tp) = (2, 2048/tp); page 2*w*2
        1: (((2, 2048),), 8192),
        2: (((2, 1024),), 4096),
        4: (((2, 512),), 2048),
        8: (((2, 256),), 1024),
    }),
    ("ColBERTLfm2Model", LFM2_SMALL, None, BF16, {
        # (2, 1024/tp); page 2*w*2
        1: (((2, 1024),), 4096),
        2: (((2, 512),), 2048),
        4: (((2, 256),), 1024),
        8: (((2, 128),), 512),
    }),
    ("Lfm2MoeForCausalLM", LFM2_MOE, None, BF16, {
        # width is hidden_size 2048 (not conv_dim 999): (2, 2048/tp)
        1: (((2, 2048),), 8192),
        2: (((2, 1024),), 4096),
        4: (((2, 512),), 2048),
        8: (((2, 256),), 1024),
    }),
    ("Lfm2VlForConditionalGeneration", LFM2_VL, None, BF16, {
        # text_config.hidden_size 2560: (2, 2560/tp); page 2*w*2
        1: (((2, 2560),), 10240),
        2: (((2, 1280),), 5120),
        4: (((2, 640),), 2560),
        8: (((2, 320),), 1280),
    }),
    ("MiniMaxText01ForCausalLM", MINIMAX_TEXT01, None, BF16, {
        # (64 // tp, 128, 128); page = heads*16384*2
        1: (((64, 128, 128),), 2097152),
        2: (((32, 128, 128),), 1048576),
        4: (((16, 128, 128),), 524288),
        8: (((8, 128, 128),), 262144),
    }),
    ("MiniMaxM1ForCausalLM", MINIMAX_TEXT01, None, BF16, {
        1: (((64, 128, 128),), 2097152),
        2: (((32, 128, 128),), 1048576),
        4: (((16, 128, 128),), 524288),
        8: (((8, 128, 128),), 262144),
    }),
    ("MiniMaxForCausalLM", MINIMAX, None, BF16, {
        # (32 // tp, 128, 128)
        1: (((32, 128, 128),), 1048576),
        2: (((16, 128, 128),), 524288),
        4: (((8, 128, 128),), 262144),
        8: (((4, 128, 128),), 131072),
    }),
    ("BailingMoeV2_5ForCausalLM", BAILING, None, BF16, {
        # head_dim = 2048 // 16 = 128; (16 // tp, 128, 128)
        1: (((16, 128, 128),), 524288),
        2: (((8, 128, 128),), 262144),
        4: (((4, 128, 128),), 131072),
        8: (((2, 128, 128),), 65536),
    }),
    ("MambaForCausalLM", MAMBA_130M, None, BF16, {
        # mamba1: I = intermediate_size 1536
        # tp1: 3*1536*2 = 9216 + 1536*16*2 = 49152 -> 58368
        1: (((3, 1536), (1536, 16)), 58368),
        # tp2: 4608 + 24576 = 29184
        2: (((3, 768), (768, 16)), 29184),
        # tp4: 2304 + 12288 = 14592
        4: (((3, 384), (384, 16)), 14592),
        # tp8: 1152 + 6144 = 7296
        8: (((3, 192), (192, 16)), 7296),
    }),
    ("FalconMambaForCausalLM", FALCON_MAMBA, None, BF16, {
        # I = 8192: same numbers as Jamba
        1: (((3, 8192), (8192, 16)), 311296),
        2: (((3, 4096), (4096, 16)), 155648),
        4: (((3, 2048), (2048, 16)), 77824),
        8: (((3, 1024), (1024, 16)), 38912),
    }),
    ("Mamba2ForCausalLM", CODESTRAL, None, BF16, {
        # I = 8192, 8 groups: conv_dim = 8192 + 2*8*128 = 10240
        # tp1: 3*10240*2 = 61440 + 128*64*128*2 = 2097152 -> 2158592
        1: (((3, 10240), (128, 64, 128)), 2158592),
        # tp2: 30720 + 1048576 = 1079296
        2: (((3, 5120), (64, 64, 128)), 1079296),
        # tp4: 15360 + 524288 = 539648
        4: (((3, 2560), (32, 64, 128)), 539648),
        # tp8: 7680 + 262144 = 269824
        8: (((3, 1280), (16, 64, 128)), 269824),
    }),
]


def _params():
    for arch, hf, text, dts, per_tp in CASES:
        for tp, want in per_tp.items():
            yield pytest.param(arch, hf, text, dts, tp, want, id=f"{arch}-tp{tp}")


@pytest.mark.parametrize("arch,hf,text,dts,tp,want", list(_params()))
def test_state_shapes_and_page_by_hand(arch, hf, text, dts, tp, want):
    info = ARCHITECTURES[arch]
    hf_config = hf if hf is not None else text
    hf_text_config = text if text is not None else hf
    if isinstance(want, str):
        with pytest.raises(ConfigRejectedError) as err:
            state_shapes(info, hf_config, hf_text_config, tp)
        assert err.value.message == want
        assert err.value.vllm_type == "AssertionError"
        return
    shapes, page = want
    got = state_shapes(info, hf_config, hf_text_config, tp)
    assert got == shapes
    assert page_size(got, state_dtypes(info, *dts)) == page


def test_every_architecture_with_a_state_has_a_hand_case():
    covered = {arch for arch, *_ in CASES}
    with_state = {name for name, info in ARCHITECTURES.items() if info.has_mamba_state}
    assert with_state == covered
    for arch, *_rest, per_tp in CASES:
        assert sorted(per_tp) == [1, 2, 4, 8], arch


# ---------------------------------------------------------------------------------------
# Calculator rules
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("n_groups", [1, 3])
def test_spec_example_3_groups_at_tp2(n_groups):
    # spec §9.3: g' = 2 for 1 group (extra +1) and for 3 groups (extra -1):
    # conv_dim / 2 = (8192 + 2*2*128) / 2 = 4352
    assert extra_groups_for_head_shards(n_groups, 2) == 2 - n_groups
    conv, temporal = mamba2_state_shape(2, 8192, n_groups, 128, 64, 128, 4)
    assert conv == (3, 4352)
    assert temporal == (64, 64, 128)


def test_conv_width_not_divisible_gives_vllm_text():
    # Bamba at tp 3: g' = 1 + 2 = 3; conv_dim = 8192 + 2*3*256 = 9728, 9728 % 3 = 2
    with pytest.raises(ConfigRejectedError) as err:
        state_shapes(ARCHITECTURES["BambaForCausalLM"], BAMBA, BAMBA, 3)
    assert str(err.value) == "9728 is not divisible by 3"
    assert err.value.vllm_type == "AssertionError"


def test_linear_attention_floors_instead_of_checking():
    # 6 heads at tp 4 -> 6 // 4 = 1, no divisibility error
    cfg = NS(model_type="minimax", num_attention_heads=6, head_dim=64)
    assert state_shapes(ARCHITECTURES["MiniMaxForCausalLM"], cfg, cfg, 4) == ((1, 64, 64),)


def test_num_spec_only_where_the_architecture_takes_it():
    # NemotronH (vllm num_speculative_tokens) and GDN (speculative_config) add spec rows
    nem = state_shapes(ARCHITECTURES["NemotronHForCausalLM"], NEMOTRON_NANO, NEMOTRON_NANO, 1, 2)
    assert nem[0] == (3 + 2, 6144)
    gdn = state_shapes(ARCHITECTURES["Qwen3NextForCausalLM"], QWEN3_NEXT, QWEN3_NEXT, 2, 1)
    assert gdn == ((4, 4096), (16, 128, 128))
    mamba2 = state_shapes(ARCHITECTURES["Mamba2ForCausalLM"], CODESTRAL, CODESTRAL, 1, 3)
    assert mamba2[0] == (6, 10240)
    # Bamba's config-level shape passes 0; KDA accepts and ignores it
    bamba = state_shapes(ARCHITECTURES["BambaForCausalLM"], BAMBA, BAMBA, 1, 2)
    assert bamba[0] == (3, 8704)
    kda = state_shapes(ARCHITECTURES["KimiLinearForCausalLM"], KIMI, KIMI, 1, 2)
    assert kda[0] == (3, 4096)


def test_falcon_h1_without_d_ssm_uses_expand_times_hidden():
    # I = int(2 * 1024) = 2048; head dim "auto" -> 2048 // 32 = 64; conv 2048 + 2*128 = 2304
    cfg = NS(model_type="falcon_h1", hidden_size=1024, mamba_expand=2, mamba_d_ssm=None,
             mamba_n_heads=32, mamba_d_head="auto", mamba_n_groups=1, mamba_d_state=128,
             mamba_d_conv=4)
    shapes = state_shapes(ARCHITECTURES["FalconH1ForCausalLM"], cfg, cfg, 1)
    assert shapes == ((3, 2304), (32, 64, 128))


def test_bailing_uses_a_present_head_dim():
    cfg = NS(model_type="bailing_hybrid", num_attention_heads=16, hidden_size=2048, head_dim=64)
    assert state_shapes(ARCHITECTURES["BailingMoeV2_5ForCausalLM"], cfg, cfg, 2) == ((8, 64, 64),)


def test_architecture_without_state_has_empty_shapes():
    info = ARCHITECTURES["LlamaForCausalLM"]
    shapes = state_shapes(info, NS(), NS(), 1)
    assert shapes == ()
    assert page_size(shapes, state_dtypes(info, "bfloat16", "auto", "auto")) == 0


@pytest.mark.parametrize("tp", [0, -1, 1.5, True])
def test_bad_tensor_parallel_size_is_invalid_input(tp):
    with pytest.raises(InvalidInputError) as err:
        state_shapes(ARCHITECTURES["JambaForCausalLM"], JAMBA, JAMBA, tp)
    assert err.value.field == "parallel_config.tensor_parallel_size"


# ---------------------------------------------------------------------------------------
# Where vLLM crashes: a clear error naming the field
# ---------------------------------------------------------------------------------------

def test_lfm2_without_conv_dim_names_the_field():
    cfg = NS(model_type="lfm2", hidden_size=2560, conv_L_cache=3)
    with pytest.raises(InvalidInputError) as err:
        state_shapes(ARCHITECTURES["Lfm2ForCausalLM"], cfg, cfg, 1)
    assert err.value.field == "hf_config.conv_dim"
    assert "conv_dim" in str(err.value) and "lfm2" in str(err.value)
    assert "absent" in str(err.value)


def test_minimax_head_dim_none_names_the_field():
    cfg = NS(model_type="minimax", num_attention_heads=32, head_dim=None)
    with pytest.raises(InvalidInputError) as err:
        state_shapes(ARCHITECTURES["MiniMaxForCausalLM"], cfg, cfg, 1)
    assert err.value.field == "hf_config.head_dim"
    assert "None" in str(err.value) and "minimax" in str(err.value)


def test_bailing_head_dim_none_names_the_field():
    cfg = NS(model_type="bailing_hybrid", num_attention_heads=16, hidden_size=2048, head_dim=None)
    with pytest.raises(InvalidInputError) as err:
        state_shapes(ARCHITECTURES["BailingMoeV2_5ForCausalLM"], cfg, cfg, 1)
    assert err.value.field == "hf_config.head_dim"


def test_kimi_without_linear_attn_config_names_the_field():
    cfg = NS(model_type="kimi_linear", linear_attn_config=None)
    with pytest.raises(InvalidInputError) as err:
        state_shapes(ARCHITECTURES["KimiLinearForCausalLM"], cfg, cfg, 1)
    assert err.value.field == "hf_config.linear_attn_config"


def test_kimi_missing_key_names_it():
    cfg = NS(model_type="kimi_linear", linear_attn_config={"num_heads": 32, "head_dim": 128})
    with pytest.raises(InvalidInputError) as err:
        state_shapes(ARCHITECTURES["KimiLinearForCausalLM"], cfg, cfg, 1)
    assert "short_conv_kernel_size" in err.value.field


def test_lfm2_vl_without_text_config():
    with pytest.raises(InvalidInputError) as err:
        state_shapes(ARCHITECTURES["Lfm2VlForConditionalGeneration"], NS(model_type="lfm2_vl"),
                     NS(), 1)
    assert err.value.field == "hf_config.text_config"


def test_text_config_field_path_is_named():
    cfg = NS(model_type="lfm2_vl", text_config=NS(model_type="lfm2", hidden_size=2560))
    with pytest.raises(InvalidInputError) as err:
        state_shapes(ARCHITECTURES["Lfm2VlForConditionalGeneration"], cfg, cfg, 1)
    assert err.value.field == "hf_config.text_config.conv_L_cache"


def test_non_numeric_field_is_invalid_input():
    cfg = NS(**{**vars(JAMBA), "mamba_d_state": "sixteen"})
    with pytest.raises(InvalidInputError) as err:
        state_shapes(ARCHITECTURES["JambaForCausalLM"], cfg, cfg, 1)
    assert err.value.field == "hf_config.mamba_d_state"
    assert "'sixteen'" in str(err.value)


@pytest.mark.parametrize("case,field", [
    ("lfm2-default", "hf_config.conv_dim"),
    ("minimax-default", "hf_config.head_dim"),
])
def test_vllm_crash_fixtures_name_the_field(case, field):
    crashes = json.loads((FIXTURES / "vllm-crashes.json").read_text())
    assert any(c["config"] == f"configs/{case}" for c in crashes)
    raw = json.loads((FIXTURES / "configs" / case / "config.json").read_text())
    hf = _view(raw)
    _, info = lookup(raw["architectures"])
    with pytest.raises(InvalidInputError) as err:
        state_shapes(info, hf, hf, 1)
    assert err.value.field == field


# ---------------------------------------------------------------------------------------
# Dtypes
# ---------------------------------------------------------------------------------------

def test_state_dtypes_per_kind():
    a = ARCHITECTURES
    assert state_dtypes(a["JambaForCausalLM"], "bfloat16", "auto", "auto") == ("bfloat16",) * 2
    assert state_dtypes(a["Mamba2ForCausalLM"], "bfloat16", "float16", "auto") == ("float16",) * 2
    assert state_dtypes(a["Qwen3NextForCausalLM"], "float16", "auto", "float32") == (
        "float16", "float32")
    assert state_dtypes(a["Lfm2ForCausalLM"], "bfloat16", "float32", "float16") == ("float32",)
    # KDA: conv dtype three times, recurrent always float32, ssm dtype ignored
    assert state_dtypes(a["KimiLinearForCausalLM"], "bfloat16", "auto", "float16") == (
        "bfloat16", "bfloat16", "bfloat16", "float32")
    # linear attention ignores the ssm dtype
    assert state_dtypes(a["MiniMaxForCausalLM"], "bfloat16", "float16", "float32") == ("float16",)


def test_linear_attention_refuses_fp32_state():
    with pytest.raises(ConfigRejectedError) as err:
        state_dtypes(ARCHITECTURES["BailingMoeV2_5ForCausalLM"], "bfloat16", "float32", "auto")
    assert str(err.value) == "fp32 state for minimax is not yet supported"
    assert err.value.vllm_type == "ValueError"


def test_hook_assigned_ssm_string_goes_through_the_table():
    # a hook may assign any STR_DTYPE key; "half" maps to float16
    info = ARCHITECTURES["NemotronHForCausalLM"]
    assert state_dtypes(info, "bfloat16", "auto", "half") == ("bfloat16", "float16")
    with pytest.raises(ConfigRejectedError) as err:
        state_dtypes(info, "bfloat16", "auto", "float64")
    assert err.value.vllm_type == "KeyError"
    assert "'float64'" in str(err.value)


def test_invalid_mamba_cache_dtype_is_vllm_value_error():
    with pytest.raises(ConfigRejectedError) as err:
        state_dtypes(ARCHITECTURES["JambaForCausalLM"], "bfloat16", "float64", "auto")
    assert str(err.value) == "Invalid kv cache dtype: float64"


# ---------------------------------------------------------------------------------------
# Attention side, alignment, chunk size
# ---------------------------------------------------------------------------------------

def test_spec_example_1_attention_bytes():
    # Qwen3-Next: 2 * kvh 2 * 256 * 2 bytes = 2048; TP 4: kvh max(1, 2 // 4) = 1 -> 1024
    assert attention_page_size_1_token(False, 2, 256, "bfloat16") == 2048
    assert attention_page_size_1_token(False, 1, 256, "bfloat16") == 1024
    # fp8 cache stores uint8: 2 * 2 * 256 * 1 = 1024
    assert attention_page_size_1_token(False, 2, 256, attention_kv_dtype("fp8", "bfloat16")) == 1024


def test_mla_attention_bytes_have_no_factor_two():
    # DeepSeek-V2: head 512 + 64 = 576, one latent per token: 576 * 2 = 1152; fp8_ds_mla -> 576
    assert attention_page_size_1_token(True, 1, 576, "bfloat16") == 1152
    assert attention_page_size_1_token(True, 1, 576, attention_kv_dtype("fp8_ds_mla", "bfloat16")) == 576


def test_spec_example_1_block_from_page():
    # mamba page 1,097,728 / (16 * 2048) -> cdiv 34 -> block 16 * 34 = 544 (spec §9.1)
    shapes = state_shapes(ARCHITECTURES["Qwen3NextForCausalLM"], QWEN3_NEXT, QWEN3_NEXT, 1)
    page = page_size(shapes, state_dtypes(ARCHITECTURES["Qwen3NextForCausalLM"],
                                          "bfloat16", "auto", "auto"))
    attn1 = attention_page_size_1_token(False, 2, 256, "bfloat16")
    align = kernel_block_alignment(False, None)
    assert page == 1_097_728
    assert align * -(-page // (align * attn1)) == 544
    # ssm float32: 2,146,304 -> 1056
    page32 = page_size(shapes, ("bfloat16", "float32"))
    assert page32 == 2_146_304
    assert align * -(-page32 // (align * attn1)) == 1056


def test_kernel_block_alignment():
    assert kernel_block_alignment(False, None) == 16
    assert kernel_block_alignment(False, "CUTLASS_MLA") == 16
    assert kernel_block_alignment(True, None) == 64
    assert kernel_block_alignment(True, "FLASHMLA") == 64
    assert kernel_block_alignment(True, "CUTLASS_MLA") == 128


def test_mamba_chunk_size_order():
    assert mamba_chunk_size(NS(mamba_chunk_size=256, chunk_size=128)) == 256
    assert mamba_chunk_size(NS(mamba_chunk_size=None, chunk_size=128)) == 128
    assert mamba_chunk_size(NS(chunk_size=None)) == 2048
    assert mamba_chunk_size(JAMBA) == 2048


# ---------------------------------------------------------------------------------------
# The fixtures' recorded pages (vLLM 0.19.0 ground truth at tp 1, 2 and 4)
# ---------------------------------------------------------------------------------------

def _view(obj):
    """A read-only-enough attribute view of a config.json dict (nested dicts become views).

    The real pipeline builds the view from the transformers config, whose class defaults
    fill absent fields; every field these architectures' recipes read is present in the
    fixture JSON files (the constructed ones are class defaults written out), so the raw
    JSON gives the same numbers.  KimiLinear's ``linear_attn_config`` would stay a dict in
    transformers; no fixture has one.
    """
    if isinstance(obj, dict):
        return NS(**{k: _view(v) for k, v in obj.items()})
    return obj


def _page_cases():
    cases = json.loads((FIXTURES / "cases.json").read_text())["cases"]
    for case in cases:
        if case["expected"].get("pages"):
            yield pytest.param(case, id=case["name"])


@pytest.mark.parametrize("case", list(_page_cases()))
def test_fixture_pages(case):
    raw = json.loads((FIXTURES / case["config"] / "config.json").read_text())
    hf = _view(raw)
    text = getattr(hf, "text_config", None) or hf
    name, info = lookup(raw["architectures"])
    expected = case["expected"]
    pages = expected["pages"]
    model = expected["config"]["model_config"]
    cache = expected["config"]["cache_config"]
    backend = expected["config"]["attention_config"]["backend"]
    tp = case["engine_args"].get("tensor_parallel_size", 1)

    assert name == model["architecture"]
    shapes = state_shapes(info, hf, text, tp)
    assert [list(s) for s in shapes] == pages["mamba_state_shapes"]
    dtypes = state_dtypes(info, model["dtype"], cache["mamba_cache_dtype"],
                          cache["mamba_ssm_cache_dtype"])
    assert list(dtypes) == pages["mamba_state_dtypes"]
    assert page_size(shapes, dtypes) == pages["mamba_page_size"]
    kv = attention_kv_dtype(cache["cache_dtype"], model["dtype"])
    assert attention_page_size_1_token(model["use_mla"], model["num_kv_heads"],
                                       model["head_size"], kv) == pages["attn_page_size_1_token"]
    assert kernel_block_alignment(model["use_mla"], backend) == pages["kernel_block_alignment_size"]
    assert mamba_chunk_size(text) == model["mamba_chunk_size"]


def test_fixture_tp_error_matches():
    # olmo-hybrid-default/tp4: vLLM stops with "30 is not divisible by 4"
    cases = json.loads((FIXTURES / "cases.json").read_text())["cases"]
    case = next(c for c in cases if c["name"] == "olmo-hybrid-default/tp4")
    raw = json.loads((FIXTURES / case["config"] / "config.json").read_text())
    hf = _view(raw)
    _, info = lookup(raw["architectures"])
    with pytest.raises(ConfigRejectedError) as err:
        state_shapes(info, hf, hf, 4)
    assert case["expected"]["error"]["message"] in str(err.value)
    assert err.value.vllm_type == case["expected"]["error"]["type"]


# ---------------------------------------------------------------------------------------
# The dtype tables these sizes rest on
# ---------------------------------------------------------------------------------------

def test_str_dtype_table_matches_vllm():
    from enginecfg.pipeline.models.dtypes import DTYPE_NAME_BYTES, STR_DTYPE_BYTES
    assert STR_DTYPE_BYTES["fp8"] == ("uint8", 1)
    assert STR_DTYPE_BYTES["fp8_e5m2"] == ("uint8", 1)
    assert STR_DTYPE_BYTES["fp8_inc"] == ("float8_e4m3fn", 1)
    assert STR_DTYPE_BYTES["half"] == ("float16", 2)
    assert STR_DTYPE_BYTES["float"] == ("float32", 4)
    assert "auto" not in STR_DTYPE_BYTES
    for name, (canon, size) in STR_DTYPE_BYTES.items():
        assert DTYPE_NAME_BYTES[canon] == size, name


def test_kv_cache_torch_dtype_rules():
    from enginecfg.pipeline.models.dtypes import kv_cache_torch_dtype
    assert kv_cache_torch_dtype("auto", "bfloat16") == "bfloat16"
    assert kv_cache_torch_dtype("auto", "torch.float16") == "float16"
    assert kv_cache_torch_dtype("auto", "half") == "float16"
    assert kv_cache_torch_dtype("fp8_e4m3", "bfloat16") == "uint8"
    with pytest.raises(ConfigRejectedError) as err:
        kv_cache_torch_dtype("auto", "complex64")
    assert str(err.value) == "Invalid model dtype: complex64"
    with pytest.raises(ConfigRejectedError) as err:
        kv_cache_torch_dtype("fp4", "bfloat16")
    assert str(err.value) == "Invalid kv cache dtype: fp4"


def test_attention_kv_dtype_unknown_names_the_value():
    assert attention_kv_dtype("auto", "float16") == "float16"
    assert attention_kv_dtype("fp8_inc", "bfloat16") == "float8_e4m3fn"
    with pytest.raises(ConfigRejectedError) as err:
        attention_kv_dtype("fp4", "bfloat16")
    assert err.value.vllm_type == "KeyError"
    assert "'fp4'" in str(err.value)


# ---------------------------------------------------------------------------------------
# Named dimensions: what a kernel needs, read from the recipe, never worked back out
# ---------------------------------------------------------------------------------------

def _named_cases():
    from enginecfg import EngineConfig

    for d in sorted(FIXTURES.joinpath("configs").iterdir()):
        try:
            cfg = EngineConfig.from_pretrained(d)
        except Exception:
            continue
        mc = cfg.model_config
        if mc.arch_info is not None and mc.arch_info.state_kind in ("mamba2", "gated_delta_net"):
            yield d.name, mc


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_named_dimensions_agree_with_the_plain_shapes(tp, warm_snapshots):
    seen = 0
    for name, mc in _named_cases():
        try:
            conv, temporal = state_shapes(mc.arch_info, mc.hf_config, mc.hf_text_config, tp)
        except (ConfigRejectedError, InvalidInputError):
            continue  # not divisible at this TP
        seen += 1
        assert conv.names == ("conv_width", "conv_dim"), name
        if mc.arch_info.state_kind == "mamba2":
            heads, head_dim, dstate = temporal.dim("heads"), temporal.dim("head_dim"), temporal.dim("state_size")
            groups = temporal.meta["groups"]
            # the conv channels are x (heads * head_dim) then B and C (groups * state each)
            assert conv.dim("conv_dim") == heads * head_dim + 2 * groups * dstate, name
            assert heads % groups == 0, name
        else:
            nv, dv, dk = temporal.dim("v_heads"), temporal.dim("head_v_dim"), temporal.dim("head_k_dim")
            nk = temporal.meta["k_heads"]
            # q and k (k_heads * dk each) then v (v_heads * dv)
            assert conv.dim("conv_dim") == 2 * nk * dk + nv * dv, name
            assert nv % nk == 0, name
    assert seen >= 5
