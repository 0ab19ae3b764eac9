"""Compile kernel variants for an H100/H200 (sm_90) on a machine without a GPU.

The interpreter runs kernel bodies as Python, so code that only the compiler refuses (a
``None`` returned from a helper, a type clash between constexpr branches) passes there and
fails on the device.  Run in a process without ``TRITON_INTERPRET``; prints one line per
kernel and variant, ``ok`` or the compiler's error.
"""

from __future__ import annotations

import itertools
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from enginecfg.kernels import gated_delta, mamba_ssm

TARGET = GPUTarget("cuda", 90, 32)


def source(kernel, constexprs: dict, types: dict) -> ASTSource:
    names = kernel.arg_names
    signature = {n: types.get(n, "i32") for n in names if n not in constexprs}
    return ASTSource(fn=kernel, signature=signature,
                     constexprs={(names.index(k),): v for k, v in constexprs.items()})


def variants():
    gdn_types = {n: "*fp32" for n in ("state_ptr", "q_ptr", "k_ptr", "v_ptr", "g_ptr", "beta_ptr", "o_ptr",
                                      "qkv_ptr", "a_ptr", "b_ptr", "alog_ptr", "dtb_ptr")}
    gdn_types.update(idx_ptr="*i32", scale="fp32", eps="fp32")
    for kernel, early, even, hints in itertools.product(
            (gated_delta._gdn_kernel, gated_delta._gdn_packed_kernel), (True, False), (True, False), (True, False)):
        yield (f"{kernel.fn.__name__} early={early} even={even} hints={hints}", kernel,
               dict(BLOCK_V=16, K_PAD=128, L2NORM=True, HAS_IDX=True, HINTS=hints, EARLY=early, EVEN=even,
                    HEAD_STRIDE=0, ROW_STRIDE=0),
               gdn_types)
    # a float32 state streamed in many waves: one warp, no hints, a register cap
    for kernel in (gated_delta._gdn_kernel, gated_delta._gdn_packed_kernel):
        yield (f"{kernel.fn.__name__} maxnreg=168", kernel,
               dict(BLOCK_V=16, K_PAD=128, L2NORM=True, HAS_IDX=True, HINTS=False, EARLY=False, EVEN=True,
                    HEAD_STRIDE=0, ROW_STRIDE=0), gdn_types, dict(num_warps=1, maxnreg=168))
    # constant state strides (the launch with few programs)
    for kernel in (gated_delta._gdn_kernel, gated_delta._gdn_packed_kernel):
        yield (f"{kernel.fn.__name__} const strides", kernel,
               dict(BLOCK_V=16, K_PAD=128, L2NORM=True, HAS_IDX=True, HINTS=False, EARLY=True, EVEN=True,
                    HEAD_STRIDE=128 * 128, ROW_STRIDE=128), gdn_types)
    conv_types = {n: "*bf16" for n in ("cs_ptr", "x_ptr", "w_ptr", "bias_ptr", "out_ptr")}
    conv_types["idx_ptr"] = "*i32"
    for width in (2, 4, 7):
        yield (f"_conv_kernel K={width}", mamba_ssm._conv_kernel,
               dict(K=width, BLOCK_D=256, HAS_BIAS=True, SILU=True, HAS_IDX=True), conv_types)


def main() -> int:
    failed = 0
    for name, kernel, constexprs, types, *options in variants():
        try:
            triton.compile(source(kernel, constexprs, types), target=TARGET, options=(options or [None])[0])
            print(f"ok {name}")
        except Exception as exc:  # noqa: BLE001 - every variant is reported
            failed += 1
            print(f"FAIL {name}: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
