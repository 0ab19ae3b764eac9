"""The writer hashes a run in two steps (most of it outside its lock); the bytes hashed must be
the ones :func:`run_hash` (what ``verify`` recomputes) hashes."""

from __future__ import annotations

import hashlib
import random

import pytest

from enginecfg.store import hashing
from enginecfg.store.hashing import (CHAIN_FIELDS, LAYOUT_STEPS, PreparedRunHash, child_hash, child_hashes,
                                      run_hash)

LAYOUTS = range(1, len(LAYOUT_STEPS) + 1)


def _value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.randint(-10 ** 12, 10 ** 12)
    if kind == 3:
        return rng.choice([0.1, -2.5e300, float("inf"), float("nan"), 3.0])
    if kind == 4:
        return rng.choice(["", "plain", "ü ∞ \"q\"\n", "\x00", "ключ"])
    if kind == 5:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(["a", "b", "é", "Z", "10", "2"]) + str(i): _value(rng, depth + 1)
            for i in range(rng.randrange(4))}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("seed", range(40))
def test_two_steps_hash_the_same_bytes(layout, seed):
    rng = random.Random(seed)
    run = {name: _value(rng) for name in ("id", "status", "model", "engine_args", "input_config", "result",
                                          "error", "started_at", "source", "whatever")}
    run.update(chain_pos=rng.randint(1, 10 ** 6), prev_hash=f"{rng.getrandbits(256):064x}",
               recorded_at=rng.random() * 2e9, hash_layout=layout)
    children = {t: [f"{rng.getrandbits(256):064x}" for _ in range(rng.randrange(3))]
                for t in ("stage_executions", "changes", "messages", "validation_checks")}
    prepared = PreparedRunHash(dict(run, chain_pos=None, prev_hash=None, recorded_at=None), children)
    assert prepared.finish(**{k: run[k] for k in CHAIN_FIELDS}) == run_hash(run, children)
    # PostgreSQL hashes in the append statement, with the head's values put between these
    a, b, c = prepared.around_head(recorded_at=run["recorded_at"])
    hashed = a + str(run["chain_pos"]).encode() + b + run["prev_hash"].encode() + c
    assert hashlib.sha256(hashed).hexdigest() == run_hash(run, children)


def test_a_different_chain_field_gives_a_different_hash():
    run = {"id": "r", "status": "ok", "chain_pos": 3, "prev_hash": "0" * 64, "recorded_at": 1.5}
    prepared = PreparedRunHash(run, {})
    assert prepared.finish(chain_pos=3, prev_hash="0" * 64, recorded_at=1.5) == run_hash(run, {})
    assert prepared.finish(chain_pos=4, prev_hash="0" * 64, recorded_at=1.5) != run_hash(run, {})


def test_a_value_holding_the_marker_still_hashes_right():
    """The one-encoding shortcut splits at a marker text; a value equal to it (never met in
    practice: it is random per process) takes the member-by-member way instead."""
    run = {"id": "r", "status": hashing._MARKER, "model": [hashing._MARKER], "chain_pos": 7,
           "prev_hash": "ab" * 32, "recorded_at": 2.5}
    prepared = PreparedRunHash(dict(run, chain_pos=None, prev_hash=None, recorded_at=None), {})
    assert prepared.finish(chain_pos=7, prev_hash="ab" * 32, recorded_at=2.5) == run_hash(run, {})


@pytest.mark.parametrize("seed", range(20))
def test_child_hashes_of_many_rows_are_each_rows_own(seed):
    rng = random.Random(seed)
    for table, fields in hashing.CHILD_FIELDS.items():
        rows = [{f: _value(rng) for f in fields} for _ in range(rng.randrange(6))]
        if rows and seed % 5 == 0:
            rows[-1][fields[-1]] = [1, hashing._MARKER, 2]  # would split the rows apart
        assert child_hashes(table, rows) == [child_hash(table, row) for row in rows]
