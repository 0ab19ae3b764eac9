"""The application layer: the ``enginecfg`` command line, its human report and its logs.

It sits above the pipeline and the audit store and is the only place that wires them
together (``enginecfg run`` attaches the store to the signal bus); neither of them imports
it. :mod:`.app` parses the command line and runs the pipeline, :mod:`.engine_flags` turns
vLLM's engine arguments into flags, :mod:`.explain` prints what :mod:`enginecfg.commands`
returns for ``explain`` and ``plan``, :mod:`.audit` holds the store's
commands, :mod:`.report` the human report of a run, :mod:`.logs` the structlog listener,
:mod:`.tables` the plain-text tables (names whole, prose wrapped), :mod:`.numbers` the one
spelling of values and figures, :mod:`.plot` the pictures of ``--plot``, :mod:`.recording`
the audit store a command records in, :mod:`.progress` the progress lines of slow steps.  The option tables of ``vllm serve`` per
release (generated from each release's parser), which let ``run``, ``explain`` and ``upgrade``
read a pasted command line as the release they run reads it, live with the releases
(:meth:`enginecfg.pipeline.releases.Release.flag_table`).
"""

from enginecfg.cli.app import build_parser, main

__all__ = ["main", "build_parser"]
