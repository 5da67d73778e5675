"""Rollout: policies behind one interface and multi-turn agent episodes.

Backends: ``HFPolicy`` (transformers, in-process), ``OpenAIPolicy`` (any
OpenAI-compatible server), ``VLLMPolicy`` (in-process vLLM, optional),
``OraclePolicy``/``SamplesPolicy``/``ScriptedPolicy`` (replays). ``make_policy``
builds one from a command-line spec; ``run_episode`` drives a multi-turn env.
"""

from polyrl.rollout.agent import ToolCall, parse_tool_call, run_episode, truncate_observation
from polyrl.rollout.base import Policy, PolicyStats, SamplingParams
from polyrl.rollout.hf import HFPolicy
from polyrl.rollout.openai_compat import OpenAIPolicy
from polyrl.rollout.replay import OraclePolicy, SamplesPolicy, ScriptedPolicy
from polyrl.rollout.spec import SPEC_FORMS, make_policy
from polyrl.rollout.vllm_backend import VLLMPolicy

__all__ = [
    "SPEC_FORMS",
    "HFPolicy",
    "OpenAIPolicy",
    "OraclePolicy",
    "Policy",
    "PolicyStats",
    "SamplesPolicy",
    "SamplingParams",
    "ScriptedPolicy",
    "ToolCall",
    "VLLMPolicy",
    "make_policy",
    "parse_tool_call",
    "run_episode",
    "truncate_observation",
]
