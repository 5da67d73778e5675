"""The domains a run config names, resolved and checked (light: no model or torch import,
so ``polyrl run --print-config`` and config errors come back fast)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from polyrl.domains.registry import get_domain
from polyrl.errors import ConfigError

if TYPE_CHECKING:
    from polyrl.config import RunConfig
    from polyrl.domains.base import Domain


def resolve_domains(cfg: RunConfig) -> list[Domain]:
    """The ``Domain`` of every ``cfg.domains`` entry (the config's order).

    Raises:
        ConfigError: no domains, an id is not registered (the message lists close ids),
            or a domain's data set is unavailable (names the file and how to fix it).
    """
    if not cfg.domains:
        raise ConfigError(cfg.origin("domains"), "domains", "list at least one domain id")
    out = []
    for i, entry in enumerate(cfg.domains):
        try:
            dom = get_domain(entry.id)
        except KeyError as e:
            raise ConfigError(cfg.origin(f"domains.{i}.id"), f"domains.{i}.id", str(e)) from None
        try:  # a missing data set fails here, before a run directory is made
            dom.split_sizes()
        except ConfigError as e:
            raise ConfigError(cfg.origin(f"domains.{i}.id"), f"domains.{i}.id",
                              f"{entry.id}: its data set is unavailable: {e}") from None
        out.append(dom)
    # the trainer and the curriculum look domains up by the config's id
    for entry, dom in zip(cfg.domains, out, strict=True):
        if dom.id != entry.id:
            entry.id = dom.id
    return out
