"""CSV cells are safe to open and unambiguous: the rule of ``jsonvalue.csv_cell``.

Every CSV enginecfg writes (``--csv`` tables, ``export --format csv``) holds one record per
line, no control character as it is, and no cell a spreadsheet would run as a formula; a
cell read back (drop one leading ``'``, undo the backslash escapes) is the value written.
"""

from __future__ import annotations

import csv
import io
import re

import pytest

from enginecfg.cli.tables import write_csv
from enginecfg.pipeline.jsonvalue import csv_cell


def read_back(cell: str) -> str:
    """The text a cell was written from (the reading the docstring of csv_cell states)."""
    if cell.startswith("'"):
        cell = cell[1:]
    return re.sub(r"\\(\\|x[0-9a-f]{2}|u[0-9a-f]{4})",
                  lambda m: "\\" if m.group(1) == "\\" else chr(int(m.group(1)[1:], 16)), cell)


HOSTILE = [
    "line\nbreak", "carriage\rreturn", "crlf\r\n", "tab\there", "esc\x1b[2Jclear", "nul\x00",
    "del\x7f", "c1\x85", "bidi\u202eevil", "lone\udce9surrogate", "back\\slash", "\\x0a",
    "=1+1", "+1", "-1+1", "@SUM(A1)", "'quoted", "=HYPERLINK(\"http://x\",\"y\")", "-", "--x",
    "\t=1+1", "\r=1", "plain", "", "café", "a,b", 'say "hi"',
]


@pytest.mark.parametrize("text", HOSTILE)
def test_a_cell_is_one_line_without_controls_or_formula_and_reads_back(text):
    cell = csv_cell(text)
    assert cell.isprintable()
    assert "\n" not in cell and "\r" not in cell and "\t" not in cell
    assert cell[:1] not in ("=", "+", "-", "@")
    assert read_back(cell) == text


def test_two_texts_never_make_the_same_cell():
    cells = [csv_cell(t) for t in HOSTILE]
    assert len(set(cells)) == len(HOSTILE)
    assert csv_cell("\n") != csv_cell("\\x0a") and csv_cell("=1") != csv_cell("'=1")


@pytest.mark.parametrize("value, cell", [(None, ""), (-3, "-3"), (-0.25, "-0.25"), ("-1e-05", "-1e-05"),
                                         (16, "16"), (True, "True"), ("-inf", "'-inf")])
def test_numbers_stay_numbers(value, cell):
    assert csv_cell(value) == cell


def test_a_table_written_as_csv_has_one_line_a_row_and_no_formula():
    out = io.StringIO()
    write_csv(out, ["field", "new"], [["model", "=cmd|' /C calc'!A0"], ["reason", "a\nb\tc"], ["n", -2]])
    lines = out.getvalue().splitlines()
    assert len(lines) == 4
    rows = list(csv.reader(io.StringIO(out.getvalue())))
    assert rows[1][1] == "'=cmd|' /C calc'!A0" and rows[2][1] == "a\\x0ab\\x09c" and rows[3][1] == "-2"
    assert [read_back(r[1]) for r in rows[1:]] == ["=cmd|' /C calc'!A0", "a\nb\tc", "-2"]

