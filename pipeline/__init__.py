"""The engine, and beside it the rooms it reads through, bottom up:

- the shared vocabulary: :mod:`.errors` (enginecfg's exceptions), :mod:`.jsonvalue` (the JSON
  kinds, the one copier, the canonical encoding), :mod:`.suggest` (closest names); these
  import nothing of enginecfg, so every room may use them;
- :mod:`.hf` -- reading a model's Hugging Face files as vLLM reads them, and the caches;
- :mod:`.models` -- vLLM's knowledge: tables and small functions;
- the engine: :mod:`.config` (the config sections and their state), :mod:`.engine_args`
  and :mod:`.arg_order` (vLLM's engine arguments and when it checks each),
  :mod:`.stage` (the stage contract), :mod:`.events` (the signal bus), :mod:`.ordering`,
  :mod:`.plugins` (discovery), :mod:`.rulepacks` (a release's rules, registered by the
  application), :mod:`.document` (the run document) and :mod:`.run` (the pipeline);
- :mod:`.loading` (with :mod:`.loadmemo`) -- files plus vLLM's knowledge become an
  ``EngineConfig``.

Each room imports only the rooms before it (``tests/test_layers.py``).  Nothing is imported
here: the store and the kernels import :mod:`.errors` without the engine.
"""

if __name__ == "pipeline":  # imported by its bare name from a checkout root on sys.path
    from enginecfg._layout import hand_over_bare_import

    hand_over_bare_import(__name__, __file__)

#: the modules other rooms may import (``from enginecfg.pipeline import *`` imports them all)
__all__ = ["errors", "jsonvalue", "suggest", "hf", "models", "config", "engine_args", "arg_order", "stage",
           "events", "ordering", "plugins", "rulepacks", "document", "run", "loading"]
