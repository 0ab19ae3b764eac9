"""Human-readable output of a run: what changed, by which stage and why, then the config."""

from __future__ import annotations

from typing import Any


def _fmt(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10000:
        return f"{value:,}"
    return "-" if value is None else str(value)


def explain_pages(result) -> list[str]:
    """Plain-words account of the hybrid page alignment, when the run did one."""
    pages = result.pages
    if not pages or not pages.get("mamba_page_size"):
        return []
    cc = result.config.cache_config
    attn1 = pages["attn_page_size_1_token"]
    mamba = pages["mamba_page_size"]
    lines = []
    bs = result.changes_for("cache_config.block_size")
    if bs:
        first, last = bs[0].old, bs[-1].new
        lines.append(
            f"The block size went from {first} to {last} tokens because one Mamba state page is "
            f"{mamba:,} bytes ({' + '.join('x'.join(map(str, s)) + ' ' + d for s, d in zip(pages['mamba_state_shapes'], pages['mamba_state_dtypes']))}) "
            f"and an attention page holds {attn1:,} bytes per token: {last} tokens x {attn1:,} B = "
            f"{last * attn1:,} bytes is the smallest multiple of {pages['kernel_block_alignment_size']} "
            f"tokens that covers it.")
    else:
        lines.append(f"The block size {cc.block_size} already gives an attention page of "
                     f"{cc.block_size * attn1:,} bytes, enough for the Mamba state page of {mamba:,} bytes.")
    padded = cc.mamba_page_size_padded
    if padded:
        pad = padded - mamba
        lines.append(f"The Mamba page was padded by {pad:,} bytes ({100 * pad / mamba:.2f}%) to {padded:,} "
                     f"bytes, exactly one attention page.")
    return lines


def print_run(result, *, recorded: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    status = f"[bold green]resolved[/] {result.config.model}"
    console.print(f"run {result.run_id}: {status}" + ("" if recorded else "  (not recorded)"))
    if result.changes:
        table = Table(title="What changed, by which stage, and why", show_lines=False)
        for col in ("#", "stage", "field", "from", "to", "why"):
            table.add_column(col, overflow="fold")
        for c in result.changes:
            table.add_row(str(c.seq), c.stage, c.field, _fmt(c.old), _fmt(c.new), c.reason)
        console.print(table)
    else:
        console.print("No stage changed anything.")
    for line in explain_pages(result):
        console.print(line)
    others = [m for m in result.messages
              if not any(m.message == c.reason for c in result.changes)]
    for m in others:
        console.print(f"[{'yellow' if m.level == 'WARNING' else 'cyan'}]{m.level}[/] {m.stage}: {m.message}")
    doc = result.to_dict()["config"]
    table = Table(title="Resolved config")
    table.add_column("field")
    table.add_column("value")
    for sec, fields in doc.items():
        if not fields:
            continue
        for k, v in fields.items():
            table.add_row(f"{sec}.{k}", _fmt(v))
    console.print(table)
    console.print(f"fingerprint {result.fingerprint}")
