"""``tools``: function calling, single-turn (generated, BFCL) and multi-turn episodes."""

from __future__ import annotations

from polyrl.domains.base import Domain


def builtin_domains() -> list[Domain]:
    """``[tools/gen-v1, tools/bfcl-v1, tools/episodes-v1]``.

    ``tools/bfcl-v1`` reads its files lazily (``bfcl.default_bfcl_dir()``), so it is
    listed even where the data is absent; using it then raises ``ConfigError``.
    """
    from polyrl.domains.tools.bfcl import BfclDomain
    from polyrl.domains.tools.episodes import ToolEpisodesDomain
    from polyrl.domains.tools.gen import ToolsGenDomain

    return [ToolsGenDomain(), BfclDomain(), ToolEpisodesDomain()]
