"""Build a policy from a command-line spec string.

Specs: ``hf:PATH_OR_ID``, ``openai:URL#MODEL``, ``vllm:PATH_OR_ID``, ``oracle``,
``samples:PATH.jsonl``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from polyrl.errors import ConfigError
from polyrl.rollout.base import Policy

SPEC_FORMS = ("hf:PATH_OR_ID", "openai:URL#MODEL", "vllm:PATH_OR_ID", "oracle", "samples:PATH.jsonl")
"""The accepted forms of a policy spec."""


def parse_spec(spec: str) -> tuple[str, str]:
    """Split a policy spec into ``(kind, argument)`` and check its form, without
    loading anything (no torch: the CLI refuses a bad ``--policy`` in a fraction of a
    second, not after seconds of imports). ``kind`` is lower-cased and stripped;
    ``oracle`` has the argument ``""``; ``openai``'s is ``URL#MODEL``.

    Raises:
        ConfigError: key ``--policy``: an unknown kind, a missing or blank part after
            ``:``, an ``openai:`` spec not of the form ``URL#MODEL``, an ``oracle:ARG``.
    """
    kind, _, arg = spec.partition(":")
    kind = kind.strip().lower()
    if kind == "oracle" and not arg:
        return kind, ""
    if kind not in ("hf", "samples", "openai", "vllm", "oracle"):
        raise _bad(spec, f"unknown policy kind {kind!r}")
    if not arg.strip():
        raise _bad(spec, "missing the part after ':'")
    if kind == "openai":
        url, _, model = arg.partition("#")
        if not url.startswith(("http://", "https://")) or not model:
            raise _bad(spec, "expected openai:http(s)://HOST:PORT[/v1]#MODEL")
    if kind == "oracle":
        raise _bad(spec, "'oracle' takes no argument")
    return kind, arg


def make_policy(spec: str, domains: Mapping[str, Any] | Iterable[Any] | None = None,
                **kwargs: Any) -> Policy:
    """Build the policy ``spec`` names.

    Args:
        spec: one of ``SPEC_FORMS`` (checked by ``parse_spec``).
        domains: for ``oracle``: ``{id: Domain}`` or Domain objects (others come from
            the registry).
        kwargs: passed to the backend's constructor (e.g. ``device``, ``max_concurrency``).
    Raises:
        ConfigError: unknown or malformed spec (key ``--policy``), unloadable model.
    """
    kind, arg = parse_spec(spec)
    if kind == "oracle":
        from polyrl.rollout.replay import OraclePolicy

        return OraclePolicy(_domain_map(domains), **kwargs)
    if kind == "hf":
        from polyrl.rollout.hf import HFPolicy

        return HFPolicy.from_pretrained(arg, **kwargs)
    if kind == "samples":
        from polyrl.rollout.replay import SamplesPolicy

        return SamplesPolicy(arg, **kwargs)
    if kind == "openai":
        from polyrl.rollout.openai_compat import OpenAIPolicy

        url, _, model = arg.partition("#")
        return OpenAIPolicy(url, model, **kwargs)
    from polyrl.rollout.vllm_backend import VLLMPolicy

    return VLLMPolicy(arg, **kwargs)


def _bad(spec: str, why: str) -> ConfigError:
    return ConfigError("<cli>", "--policy", f"{why} in {spec!r}; use one of {', '.join(SPEC_FORMS)}")


def _domain_map(domains: Mapping[str, Any] | Iterable[Any] | None) -> dict[str, Any]:
    if domains is None:
        return {}
    if isinstance(domains, Mapping):
        return dict(domains)
    return {d.id: d for d in domains}
