"""Closest-match suggestions for names people type: fields, stages, engine arguments, run ids.

One helper so every "unknown name" error reads the same: ``did you mean X, Y?``.  Matching
is difflib's ratio, also tried against the last dotted part of each candidate so that
``block_size`` finds ``cache_config.block_size``.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["closest", "did_you_mean"]


def closest(word: str, candidates: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """Up to *n* candidates closest to *word*, best first."""
    import difflib  # only when a name is unknown: the error path

    pool = list(dict.fromkeys(c for c in candidates if isinstance(c, str)))
    if not isinstance(word, str) or not word or not pool:
        return []
    scored: dict[str, float] = {}
    low = word.lower()
    for cand in pool:
        c = cand.lower()
        tail = c.rsplit(".", 1)[-1]
        score = max(difflib.SequenceMatcher(None, low, c).ratio(),
                    difflib.SequenceMatcher(None, low, tail).ratio() if tail != c else 0.0)
        if low == tail or c.startswith(low) and len(low) >= 4:
            score = max(score, 0.99)
        if score >= cutoff:
            scored[cand] = score
    return sorted(scored, key=lambda k: (-scored[k], k))[:n]


def did_you_mean(word: str, candidates: Iterable[str], n: int = 3) -> str:
    """``" (did you mean 'a', 'b'?)"`` or the empty string when nothing is close."""
    found = closest(word, candidates, n)
    return f" (did you mean {', '.join(repr(f) for f in found)}?)" if found else ""
