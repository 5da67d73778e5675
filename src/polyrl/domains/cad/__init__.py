"""``cad``: solid modelling from a description, scored by IoU, Chamfer, views, holes, validity,
no extra material.

Needs the optional extra ``polyrl[cad]`` (trimesh, manifold3d); importing this
package without them raises ``ImportError`` naming the extra.
"""

from __future__ import annotations

from polyrl.domains.base import Domain


def _require_extra() -> None:
    missing = []
    for mod in ("manifold3d", "trimesh"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        raise ImportError(
            f"the cad domain needs {', '.join(missing)}: pip install 'polyrl[cad]'"
        )


def builtin_domains() -> list[Domain]:
    """``[cad/gen-v1]``.

    Raises:
        ImportError: the ``cad`` extra is not installed.
    """
    _require_extra()
    from polyrl.domains.cad.domain import CadGenDomain

    return [CadGenDomain()]
