"""Public names of a package imported on first use (PEP 562 module ``__getattr__``).

``polyrl.eval`` and ``polyrl.rollout`` export names whose submodules pull in torch and
transformers (seconds); their light submodules (``polyrl.eval.rundir``,
``polyrl.rollout.spec``) must be importable without them, so that the CLI can refuse bad
input, or answer a finished run, before those imports.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, names: dict[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package`` (its ``__name__``) for
    ``names`` (public name -> the submodule of ``package`` that defines it).

    ``__getattr__(name)`` imports the submodule on first use and keeps the value in the
    package's namespace, so later lookups are plain attribute reads.

    Raises (from ``__getattr__``):
        AttributeError: ``name`` is no public name (``from package import submodule``
            then imports the submodule, as Python does for packages).
    """
    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{names[name]}"), name)
        vars(sys.modules[package])[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
