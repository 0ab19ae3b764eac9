"""Pictures of the KV-cache figures: ``explain --plot`` and ``plan --plot``.

``plan --plot FILE`` draws the concurrency against the context length for every setting of
the grid, one line each (a setting vLLM would not start with is dashed, up to the longest
context that fits); ``explain --plot FILE`` draws one setting's curve and, beside it, the
KV-cache pages one request takes at each context length.  Both axes are logarithmic: the
context from 128 tokens to max_model_len, the requests that fit at once as vLLM counts them.

The curves come from :meth:`enginecfg.commands.Explanation.curve` and
:meth:`enginecfg.commands.PlanRow.curve` (the figures' own arithmetic).  The file type
follows the name: PNG, or SVG with its text kept as text (the labels can be searched).
matplotlib is an optional dependency: ``pip install 'enginecfg[plot]'``.
"""

from __future__ import annotations

from typing import Any

from enginecfg.pipeline.errors import InvalidInputError

__all__ = ["plot_explanation", "plot_plan", "setting_label"]

_SHORT = {"tensor_parallel_size": "tp", "kv_cache_dtype": "kv", "block_size": "block",
          "mamba_cache_mode": "mamba", "max_model_len": "max len", "gpu": "gpu",
          "gpu_memory_utilization": "util", "enable_prefix_caching": "prefix cache"}


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise InvalidInputError("--plot needs matplotlib, which is not installed; install it with "
                                "pip install 'enginecfg[plot]'", field="plot") from None
    matplotlib.use("Agg", force=True)
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text in an SVG
    matplotlib.rcParams["svg.hashsalt"] = "enginecfg"  # the same picture, the same file
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: str) -> None:
    kind = "svg" if path.lower().endswith(".svg") else "png"
    metadata = {"Date": None} if kind == "svg" else {"Software": None}
    try:
        fig.savefig(path, format=kind, dpi=110, metadata=metadata, bbox_inches="tight")
    except OSError as exc:
        raise InvalidInputError(f"invalid --plot {path}: cannot write it ({exc.strerror or exc})",
                                field="plot") from None
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def _tokens(n: float, _pos: Any = None) -> str:
    if n >= 2**20 and n % 2**20 == 0:
        return f"{int(n) // 2**20}M"
    if n >= 1024 and n % 1024 == 0:
        return f"{int(n) // 1024}K"
    return f"{int(n):,}"


def _context_axis(ax: Any) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=4))
    ax.xaxis.set_major_formatter(FuncFormatter(_tokens))
    ax.set_xlabel("context length per request (tokens)")
    ax.grid(True, which="major", alpha=0.3)


def setting_label(row) -> str:
    """A grid row as a legend names it: what vLLM resolved for each axis."""
    parts = []
    for name, asked in row.setting.items():
        got = row.resolved.get(name, asked) if row.ok else asked
        parts.append(f"{_SHORT.get(name, name)} {got}" + (f" (asked {asked})" if row.ok and name in row.differs
                                                          else ""))
    return ", ".join(parts) or "default"


def plot_explanation(e, path: str) -> None:
    """One setting: the requests that fit at each context length, and the KV-cache pages one
    request takes (vLLM's blocks of every KV-cache group together)."""
    plt = _pyplot()
    points = [p for p in e.curve() if p[1] > 0]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    imp = e.impact
    title = f"{e.model}: {imp.memory.gpu}, {imp.memory.kv_cache_memory / 2**30:.1f} GiB of KV cache"
    if not e.starts:
        title += " (vLLM would not start)"
    fig.suptitle(title, fontsize=10)
    label = "requests that fit" + ("" if e.starts else ", were --max-model-len lowered")
    if points:
        left.plot([p[0] for p in points], [p[1] for p in points], marker=".", label=label)
        right.plot([p[0] for p in points], [p[2] for p in points], marker=".", color="tab:orange",
                   label="KV-cache pages per request")
    for ax in (left, right):
        _context_axis(ax)
    left.set_yscale("log")
    left.set_ylabel("concurrent requests")
    right.set_yscale("log")
    right.set_ylabel("pages (blocks) one request takes")
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    _save(fig, path)


def plot_plan(p, path: str) -> None:
    """Every setting of a grid: the requests that fit at each context length."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 5))
    drawn = 0
    for row in p.rows:
        if not row.ok:
            continue
        fits = row.impact.max_model_len_fits
        points = [pt for pt in row.curve() if pt[1] > 0 and (row.starts or pt[0] <= fits)]
        label = setting_label(row) + ("" if row.starts else " (does not start)")
        if not points:
            continue
        ax.plot([pt[0] for pt in points], [pt[1] for pt in points], label=label,
                linestyle="-" if row.starts else "--")
        drawn += 1
    _context_axis(ax)
    ax.set_yscale("log")
    ax.set_ylabel("concurrent requests")
    ax.set_title(f"{p.model}: concurrency against context length", fontsize=10)
    if drawn:
        ax.legend(fontsize=8, ncol=2 if drawn > 6 else 1)
    _save(fig, path)
