"""Order stages by their ``after`` / ``before`` hints.

A stable topological sort: among the stages whose constraints are met, the one declared
first (built-ins in their listed order, then plugins) runs first.  Unknown names, duplicate
names and cycles are refused with :class:`StageOrderError` naming them.
"""

from __future__ import annotations

import heapq
from typing import Sequence

from enginecfg.pipeline.errors import StageOrderError
from enginecfg.pipeline.stage import Stage

__all__ = ["order_stages"]


def _find_cycle(names: list[str], edges: dict[str, set[str]]) -> list[str]:
    """One cycle among *names* (which all still have unmet predecessors)."""
    pending = set(names)
    preds: dict[str, list[str]] = {n: [] for n in names}
    for a, outs in edges.items():
        for b in outs:
            if a in pending and b in pending:
                preds[b].append(a)
    node = sorted(names)[0]
    path: list[str] = []
    seen: dict[str, int] = {}
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = sorted(preds[node])[0]
    cycle = path[seen[node]:]
    cycle.reverse()
    return cycle + [cycle[0]]


#: orders already worked out, by the stages' names and hints (every Pipeline() orders the same
#: built-ins and plugins again; a set of hints seen before costs one dict lookup)
_ORDERS: dict[tuple, tuple[int, ...]] = {}


def order_stages(stages: Sequence[Stage]) -> list[Stage]:
    """*stages* in run order (see the module doc); the same hints give the same order."""
    # only hint sets that were ordered without error are kept; a hint given as a list (not
    # hashable) is ordered afresh each time
    sig = tuple([(getattr(st, "name", None), st.after, st.before) for st in stages])
    try:
        known = _ORDERS.get(sig)
    except TypeError:
        sig = known = None
    if known is not None:
        return [stages[i] for i in known]
    out = _order(stages)
    if sig is not None and len(_ORDERS) < 64:
        position = {id(st): i for i, st in enumerate(stages)}
        _ORDERS[sig] = tuple(position[id(st)] for st in out)
    return out


def _order(stages: Sequence[Stage]) -> list[Stage]:
    by_name: dict[str, Stage] = {}
    for st in stages:
        name = getattr(st, "name", "")
        if not isinstance(name, str) or not name:
            raise StageOrderError(f"stage {st!r} has no name", field="name")
        if name in by_name:
            other = by_name[name]
            raise StageOrderError(
                f"two stages are named {name!r}: one from {other.origin}, one from {st.origin}",
                field="name", stage=name)
        by_name[name] = st
    index = {name: i for i, name in enumerate(by_name)}
    edges: dict[str, set[str]] = {n: set() for n in by_name}
    for name, st in by_name.items():
        for kind, refs in (("after", st.after), ("before", st.before)):
            if isinstance(refs, str):
                refs = (refs,)
            for ref in refs:
                if ref not in by_name:
                    raise StageOrderError(
                        f"stage {name!r} ({st.origin}) names an unknown stage in {kind}: {ref!r}; "
                        f"known stages: {', '.join(by_name)}", field=kind, stage=name)
                if kind == "after":
                    edges[ref].add(name)
                else:
                    edges[name].add(ref)
    indegree = {n: 0 for n in by_name}
    for outs in edges.values():
        for b in outs:
            indegree[b] += 1
    ready = [(index[n], n) for n, d in indegree.items() if d == 0]
    heapq.heapify(ready)
    out: list[Stage] = []
    while ready:
        _, n = heapq.heappop(ready)
        out.append(by_name[n])
        for b in edges[n]:
            indegree[b] -= 1
            if indegree[b] == 0:
                heapq.heappush(ready, (index[b], b))
    if len(out) != len(by_name):
        left = [n for n in by_name if indegree[n] > 0]
        cycle = _find_cycle(left, edges)
        raise StageOrderError("stage order has a cycle: " + " -> ".join(cycle), field="after")
    return out
