"""What the parts of vLLM's memory budget cost on a real card, measured under PyTorch alone.

vLLM is not needed (nor installed on the card this ran on): the script measures the pieces the
worker's arithmetic is made of, so that the estimates of :mod:`enginecfg.pipeline.models.memory`
can be held against a measurement:

- ``context``: what the card has in use once a process's CUDA context exists (vLLM 0.34.0's
  budget starts from the card's total, so this is memory its extensible KV cache cannot have);
- ``cublas``: the non-torch memory the first matrix product and the first biased linear add
  (the cuBLAS and cuBLASLt handles; their workspace comes from torch's allocator);
- ``triton``: the non-torch memory of the first Triton kernel loaded;
- ``nccl``: the non-torch memory of a one-rank NCCL group and its first all-reduce;
- ``forward``: the torch peak above the weights of a decoder stack (RMSNorm, QKV, causal
  attention, output projection, gated MLP) at several token counts, eager and compiled;
- ``sampler``: the torch peak of the profiling run's sampler steps (logits in the model dtype,
  float32 copy, temperature, softmax, the exponential draw and the division) at several
  request counts and vocabulary sizes;
- ``cuda_graphs``: the memory the first and each later capture of the stack takes in one
  shared pool (what vLLM's CUDA graph estimate measures).

Run it on the card: ``python3 bench/gpu_memory_probe.py`` (writes ``$OUT/memory_probe.json``, or
``./memory_probe.json``).  The figures and their date are in ``bench/NOTES.md``.
"""

from __future__ import annotations

import gc
import json
import os
import time

import torch
import torch.nn.functional as F

D, B = "cuda", torch.bfloat16
mm = torch.cuda.max_memory_allocated


def free():
    torch.cuda.synchronize()
    return torch.cuda.mem_get_info()[0]


def rms(r):
    return (r.float() * torch.rsqrt(r.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(B)


class Stack(torch.nn.Module):
    # two decoder layers as vLLM runs them, unfused; the KV heads are repeated for PyTorch's
    # flash kernel (vLLM's read them in place: take 2 x tokens x (heads - kv) x head x 2 bytes off)
    def __init__(s, h, i, nh, nkv, hd):
        super().__init__()
        s.s = (nh, nkv, hd)
        s.w = torch.nn.ParameterList(torch.randn(*a, dtype=B, device=D) / 50 for _ in range(2)
                                     for a in [((nh + 2 * nkv) * hd, h), (h, nh * hd), (2 * i, h), (h, i)])

    def forward(s, x):
        nh, nkv, hd = s.s
        t, r = len(x), torch.zeros_like(x)
        for j in (0, 4):
            qkv, o, gu, d = s.w[j:j + 4]
            r = x + r
            q, k, v = (y.view(t, -1, hd).transpose(0, 1) for y in F.linear(rms(r), qkv).split([nh * hd, nkv * hd, nkv * hd], -1))
            a = F.scaled_dot_product_attention(q[None], k.repeat_interleave(nh // nkv, 0)[None],
                                               v.repeat_interleave(nh // nkv, 0)[None], is_causal=True)
            r = F.linear(a[0].transpose(0, 1).reshape(t, -1), o) + r
            g, u = F.linear(rms(r), gu).chunk(2, -1)
            x = F.linear(F.silu(g) * u, d)
        return x + r


def peak(fn, *a):
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    m = torch.cuda.memory_allocated()
    with torch.inference_mode():
        fn(*a)
    torch.cuda.synchronize()
    return mm() - m


def sample(x, w, temp):
    l32 = (x @ w.t()).float()       # the LM head's output (model dtype), then float32
    l32.argmax(-1)                  # greedy
    p = l32.div_(temp).softmax(-1)  # temperature in place, softmax
    p.div(torch.empty_like(p).exponential_()).argmax(-1)


def main():
    t0 = time.time()
    r = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__}
    total = torch.cuda.get_device_properties(0).total_memory
    f0 = free()
    r.update(device=torch.cuda.get_device_name(), total=total, context=total - f0)
    x = torch.ones(16, 16, dtype=B, device=D)
    torch.mm(x, x)
    F.linear(x, x, x[0])
    f1 = free()
    r["cublas"] = (f0 - f1, torch.cuda.memory_reserved())   # all in use, and torch's part of it
    r["fwd"] = {}
    for name, sh in {"llama8b": (4096, 14336, 32, 8, 128), "q27attn": (5120, 17408, 24, 4, 256)}.items():
        m = Stack(*sh)
        r["fwd"][name] = {t: peak(m, torch.randn(t, sh[0], dtype=B, device=D)) for t in (512, 2048, 8192, 16384)}
        if name == "llama8b":
            c = torch.compile(m, dynamic=False)
            r["compiled"] = {t: peak(c, torch.randn(t, sh[0], dtype=B, device=D)) for t in (2048, 8192)}
            pool, keep, caps = torch.cuda.graph_pool_handle(), [], []
            with torch.inference_mode():
                for t in (512, 256, 8):
                    xi = torch.randn(t, sh[0], dtype=B, device=D)
                    m(xi)
                    f, g = free(), torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g, pool=pool):
                        keep.append((g, xi, m(xi)))
                    caps.append((t, f - free()))
            r["graphs"] = caps
            del keep
        del m
        gc.collect()
        torch.cuda.empty_cache()
    r["sampler"] = []
    for n, v in ((256, 151936), (1024, 151936), (1024, 248320)):
        w = torch.randn(v, 4096, dtype=B, device=D)
        x = torch.rand(n, 4096, dtype=B, device=D)
        r["sampler"].append((n, v, peak(sample, x, w, torch.full((n, 1), 0.5, device=D))))
        del w, x
    r["s"] = round(time.time() - t0)
    print(json.dumps(r))
    open(os.environ.get("OUT", ".") + "/memory_probe.json", "w").write(json.dumps(r))


if __name__ == "__main__":
    main()
