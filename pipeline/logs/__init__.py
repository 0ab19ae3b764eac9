"""A vLLM start-up log read back.

Users paste the log of an engine start into issues to ask why its figures are what they are;
this room reads that text as pasted (prefixes, colours, ranks, wrapped lines: :mod:`.lines`)
into values: the release, the model, the arguments, and every line that states a decision or a
figure, each with its line number and its own words (:mod:`.facts`), grouped by engine start
(:mod:`.startlog`).  It reads text and nothing else: no config, no arithmetic, no I/O; what
the figures should have been is the commands' work (``enginecfg check-log``).

    from enginecfg.pipeline.logs import read
    log = read(open("start.log").read())
    log.last.release, log.last.first("kv_cache_size").value
"""

from enginecfg.pipeline.logs.facts import KINDS, Logged, gib_range, read_dict
from enginecfg.pipeline.logs.lines import Line, logical_lines
from enginecfg.pipeline.logs.startlog import Command, Start, StartupLog, read

__all__ = ["read", "StartupLog", "Start", "Command", "Logged", "KINDS", "Line", "logical_lines", "gib_range",
           "read_dict"]
