"""A run with more rows than one statement may carry is recorded whole (PostgreSQL binds at
most 65,535 parameters a statement; the append sends what does not fit after it, in the
same transaction)."""

from __future__ import annotations

from enginecfg.testing import emit_run


def test_a_run_with_thousands_of_changes_is_recorded_whole(store):
    emit_run()
    big = emit_run(extra_changes=7000)  # 70,000+ change parameters
    emit_run()
    assert store.write_failed == 0, store.record_error
    run = store.get_run(big)
    assert len(run["changes"]) == 7005
    assert [c["seq"] for c in run["changes"]] == list(range(1, 7006))
    assert store.recorded == 3 and store.verify().ok
