"""The auditors' page: a read-only web view of the audit store (``enginecfg ui``).

:mod:`.facts` turns a stored run into what people read (shared with ``enginecfg show``);
:mod:`.pages` is a small WSGI application over the store's query functions, its HTML made
by Jinja2 with autoescaping (the ``ui`` extra), its charts drawn as inline SVG on the
server (:mod:`.charts`); :func:`.pages.serve` serves it with waitress (the ``ui`` extra),
which holds many clients at once, slow ones included, bound to 127.0.0.1 unless told otherwise.  Nothing here writes to the store: the database
is opened read-only and every method but GET and HEAD is refused.
"""

