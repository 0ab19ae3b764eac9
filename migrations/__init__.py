"""Alembic environment and versions of the audit store, shipped inside the package.

:func:`enginecfg.store.engine.alembic_config` points Alembic's ``script_location`` at this
package's directory, so ``enginecfg db upgrade`` works from an installed wheel without an
``alembic.ini`` in the working directory.  ``alembic.ini`` here is a template for running
the ``alembic`` command by hand (``alembic -c <this dir>/alembic.ini -x url=...``).
"""

if __name__ == "migrations":  # imported by its bare name from a checkout root on sys.path
    from enginecfg._layout import hand_over_bare_import

    hand_over_bare_import(__name__, __file__)

#: nothing is imported by name: Alembic reads env.py and the revisions by path
__all__: list[str] = []
