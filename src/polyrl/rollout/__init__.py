"""Rollout: policies behind one interface and multi-turn agent episodes.

Backends: ``HFPolicy`` (transformers, in-process), ``OpenAIPolicy`` (any
OpenAI-compatible server), ``VLLMPolicy`` (in-process vLLM, optional),
``OraclePolicy``/``SamplesPolicy``/``ScriptedPolicy`` (replays). ``make_policy``
builds one from a command-line spec; ``run_episode`` drives a multi-turn env.

The names below are imported on first use (module ``__getattr__``), as ``polyrl.eval``'s
are: ``HFPolicy`` pulls in torch and transformers (seconds), which ``polyrl.rollout.spec``
(``parse_spec``) does not need, so ``polyrl eval`` refuses a malformed ``--policy``
before those imports.
"""

from __future__ import annotations

from polyrl.lazy import lazy_exports

_LAZY = {
    "ToolCall": "agent",
    "parse_tool_call": "agent",
    "run_episode": "agent",
    "truncate_observation": "agent",
    "Policy": "base",
    "PolicyStats": "base",
    "SamplingParams": "base",
    "HFPolicy": "hf",
    "OpenAIPolicy": "openai_compat",
    "OraclePolicy": "replay",
    "SamplesPolicy": "replay",
    "ScriptedPolicy": "replay",
    "SPEC_FORMS": "spec",
    "make_policy": "spec",
    "parse_spec": "spec",
    "VLLMPolicy": "vllm_backend",
}
"""Public name -> the submodule of ``polyrl.rollout`` that defines it."""

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
