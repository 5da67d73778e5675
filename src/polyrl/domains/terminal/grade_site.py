"""The ``sitecustomize`` of every Python that a terminal task's tests start.

``env.run_tests`` ships this file's text as ``python/sitecustomize.py`` in the grading
command's read-only test folder, and the grader runs the check (``run-tests.sh``,
``check.sh``, ``check.py``, pytest) with ``PYTHONSAFEPATH=1`` (Python 3.11+: no folder is
put first on ``sys.path``), ``PYTHONNOUSERSITE=1`` and ``PYTHONPATH`` = that folder, so
every ``python3`` they start imports this module at start-up. Imported under its own
name (``polyrl.domains.terminal.grade_site``) it changes nothing.

What it does (``main``): takes its folder off ``sys.path`` again, runs the next
``sitecustomize`` on the path (a distribution's own), and appends to ``sys.meta_path``
a finder of top-level modules in the folder that Python would have put first: the
script's folder (symlinks resolved), or the cwd for ``-c``, ``-m``, ``-`` and the
interactive prompt. That folder is searched after every ``sys.path`` folder (standard
library, site-packages) and is not on ``sys.path`` at all: so ``import solution`` from
``/workspace`` still works, but a ``pytest/`` package, a standard-library name
(``argparse.py``) or a ``*.dist-info`` with a ``pytest11`` entry point that the agent
left there does not take the place of the real module nor load as a plugin
(``importlib.metadata`` looks for distributions on ``sys.path`` only).

Limits: a script that sets ``PYTHONPATH`` itself replaces this folder (the cwd or the
script's folder is then not searched at all); a module of that folder named like a
standard or installed one loses to it; a zip application's own modules are not found.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import ModuleSpec, PathFinder
from importlib.util import module_from_spec


def first_folder(argv0: str) -> str | None:
    """The folder Python puts first on ``sys.path`` when not in safe-path mode, for
    ``sys.argv[0]`` as it is at start-up (``"-c"``, ``"-m"``, ``"-"``, ``""`` or the
    script's path); None when the cwd is gone."""
    if argv0 in ("", "-c", "-m", "-"):
        try:
            return os.getcwd()
        except OSError:
            return None
    return argv0 if os.path.isdir(argv0) else os.path.dirname(os.path.realpath(argv0))


class LastFinder:
    """Finds top-level modules in ``folder``; appended to ``sys.meta_path``, so only
    names that no ``sys.path`` folder holds. No ``find_distributions``: packages'
    metadata in ``folder`` stays unseen."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def find_spec(self, name: str, path: object = None,
                  target: object = None) -> ModuleSpec | None:
        """The spec of top-level module ``name`` in the folder, or None (a submodule,
        ``sitecustomize``/``usercustomize``, or not there)."""
        if path is not None or name in ("sitecustomize", "usercustomize"):
            return None
        spec = PathFinder.find_spec(name, [self.folder])
        if spec is not None and spec.loader is None and spec.submodule_search_locations:
            # a namespace package: a fixed list, not one recomputed from sys.path
            spec.submodule_search_locations = list(spec.submodule_search_locations)
        return spec


def main() -> None:
    """Set up the interpreter as the module docstring says."""
    me = os.path.realpath(__file__)
    here = os.path.dirname(me)
    sys.path[:] = [p for p in sys.path if not p or os.path.realpath(p) != here]
    spec = PathFinder.find_spec("sitecustomize", sys.path)
    if spec is not None and spec.loader is not None and spec.origin \
            and os.path.realpath(spec.origin) != me:
        spec.loader.exec_module(module_from_spec(spec))
    folder = first_folder(sys.argv[0] if sys.argv else "")
    if folder is not None and getattr(sys.flags, "safe_path", False):
        sys.meta_path.append(LastFinder(folder))


if __name__ == "sitecustomize":
    main()
