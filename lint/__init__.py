"""The project's own lint checks, run by ``make lint`` beside ruff, mypy, vulture and lint-imports.

:mod:`lint.funcsize` holds every function to a size limit; :mod:`lint.vulture_whitelist` lists
the names vulture cannot see used (Spark callbacks, protocols, public API). Nothing here is
shipped: the wheel holds ``fsstate`` and ``fsstate_spark`` only.
"""
