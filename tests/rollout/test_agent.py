"""run_episode: budgets, observation truncation, tool-call parsing, exact token records."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from polyrl.domains.base import Env
from polyrl.errors import ParseError
from polyrl.rollout import (
    HFPolicy,
    SamplingParams,
    ScriptedPolicy,
    parse_tool_call,
    run_episode,
    truncate_observation,
)
from tests.rollout.conftest import make_task


class ShellEnv(Env):
    """Echoes each action; ``submit`` ends the episode with reward 1."""

    def __init__(self, obs_len: int = 0, first: str = "ready") -> None:
        self.obs_len = obs_len
        self.first = first
        self.actions: list[str] = []

    def reset(self, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.actions = []
        return self.first, {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.actions.append(action)
        if action.strip() == "submit":
            return "", 1.0, True, False, {"n": len(self.actions)}
        return f"ran {action!r}" + "x" * self.obs_len, 0.0, False, False, {"observation_role": "tool"}


def test_scripted_episode_record_matches_chat_template(hf_policy: HFPolicy) -> None:
    tok = hf_policy.tokenizer
    policy = ScriptedPolicy(["ls", "cat f", "submit"], tokenizer=tok)
    task = make_task(1)
    env = ShellEnv()
    ep = run_episode(policy, env, task, max_turns=5)
    assert env.actions == ["ls", "cat f", "submit"]
    assert ep.reward == 1.0 and ep.terminated and not ep.truncated
    assert [t.role for t in ep.turns] == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert ep.info["end"] == "terminated" and ep.info["env_info"] == {"n": 3}
    ids, lps, mask = ep.flat_tokens()
    assert len(ids) == len(lps) == len(mask)
    assert sum(mask) == sum(len(t.token_ids) for t in ep.turns if t.trainable)
    # The token record decodes to the chat-template rendering of the conversation.
    msgs = [*task.prompt, {"role": "user", "content": "ready"},
            {"role": "assistant", "content": "ls"}, {"role": "tool", "content": "ran 'ls'"},
            {"role": "assistant", "content": "cat f"}, {"role": "tool", "content": "ran 'cat f'"}]
    expect = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) + "submit"
    assert tok.decode(ep.prompt_token_ids + ids) == expect


def test_model_episode_logprobs_are_exact(hf_policy: HFPolicy) -> None:
    ep = run_episode(hf_policy, ShellEnv(), make_task(2), max_turns=3, max_tokens_per_turn=5,
                     sampling=SamplingParams(seed=3))
    assert ep.truncated and ep.info["end"] == "turn_budget"
    assert [t.trainable for t in ep.turns] == [True, False, True, False, True]
    ids, lps, mask = ep.flat_tokens()
    full = torch.tensor([ep.prompt_token_ids + ids])
    with torch.no_grad():
        logits = hf_policy.model(input_ids=full).logits[0].float()
    p = len(ep.prompt_token_ids)
    ref = torch.log_softmax(logits[p - 1 : -1], -1).gather(-1, full[0, p:, None]).squeeze(-1)
    m = torch.tensor(mask, dtype=torch.bool)
    assert m.sum() > 0
    assert torch.allclose(ref[m], torch.tensor(lps)[m], atol=1e-4)


def test_token_budget_and_observation_truncation(hf_policy: HFPolicy) -> None:
    ep = run_episode(ScriptedPolicy(["a", "b", "c"], tokenizer=hf_policy.tokenizer),
                     ShellEnv(obs_len=500), make_task(0), max_turns=3,
                     observation_max_chars=60, max_total_tokens=100)
    env_turns = [t for t in ep.turns if not t.trainable]
    assert env_turns and all(len(t.content) <= 60 for t in env_turns)
    assert "chars truncated" in env_turns[0].content
    assert ep.truncated and ep.info["end"] == "token_budget"
    assert len(ep.flat_tokens()[0]) <= 100


def test_tool_calls_recorded() -> None:
    script = ['<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>', "submit"]
    ep = run_episode(ScriptedPolicy(script), ShellEnv(), make_task(0))
    assert ep.info["tool_calls"] == [{"name": "add", "arguments": {"a": 1}}, None]
    assert ep.prompt_token_ids == [] and ep.text.endswith("submit")


def test_parse_tool_call_forms() -> None:
    assert parse_tool_call('<tool_call>{"name": "f", "arguments": {"x": 2}}').arguments == {"x": 2}
    c = parse_tool_call('I will call {"name": "g", "parameters": "{\\"y\\": 1}"} now')
    assert c is not None and (c.name, c.arguments) == ("g", {"y": 1})
    assert parse_tool_call("no call {here}") is None
    with pytest.raises(ParseError):
        parse_tool_call("<tool_call>{broken</tool_call>")


def test_truncate_observation() -> None:
    assert truncate_observation("short", 10) == "short"
    t = truncate_observation("h" * 50 + "t" * 50, 40)
    assert len(t) <= 40 and t.startswith("h") and t.endswith("t")


@pytest.mark.parametrize("size,limit", [(100, 40), (1000, 40), (99_990, 60), (1000, 31),
                                        (1000, 30), (1000, 10), (1000, 0)])
def test_truncation_marker_counts_what_it_left_out_and_fits(size: int, limit: int) -> None:
    """The marker said len(text) - max_chars (1000 chars at 40: '960 truncated') while
    989 were left out, and a limit below the marker's length returned the marker alone
    (29 chars for max_chars=10)."""
    text = "".join(chr(ord("a") + i % 26) for i in range(size))
    t = truncate_observation(text, limit)
    assert len(t) <= limit
    if "chars truncated" in t:
        head, rest = t.split("\n...[", 1)
        n, tail = rest.split(" chars truncated]...\n", 1)
        assert int(n) == size - len(head) - len(tail)
        assert text.startswith(head) and text.endswith(tail)
    else:
        assert t == text[:limit]


def test_a_turn_ended_on_an_end_of_turn_token_is_not_closed_twice() -> None:
    """A policy that stops on an end-of-turn token the tokenizer does not call its EOS
    (Gemma's <end_of_turn>, Phi-3's <|end|>: in the generation config's eos ids) had the
    template's closing token added again as an environment token: the next turn
    conditioned on 'hi<|end|><|end|>', a context the chat template never produces."""
    from polyrl.models.tiny import build_byte_tokenizer

    tok = build_byte_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<|end|>"]})
    tok.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'assistant' %}A: {{ m['content'] }}<|end|>\n"
        "{% else %}Q: {{ m['content'] }}\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}A: {% endif %}")
    task = make_task(0, "go")
    ep = run_episode(ScriptedPolicy(["hi<|end|>", "ok"], tokenizer=tok), ShellEnv(first=""),
                     task, max_turns=2)
    assert ep.turns[0].token_ids[-1] == tok.convert_tokens_to_ids("<|end|>")
    ids, _, mask = ep.flat_tokens()
    msgs = [*task.prompt, {"role": "assistant", "content": "hi"},
            {"role": "tool", "content": ep.turns[1].content}]
    expect = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) + "ok"
    assert tok.decode(ep.prompt_token_ids + ids) == expect
    # a turn ended by an ordinary token keeps the template's whole closing
    ep = run_episode(ScriptedPolicy(["hi", "ok"], tokenizer=tok), ShellEnv(first=""), task,
                     max_turns=2)
    msgs[-1] = {"role": "tool", "content": ep.turns[1].content}
    expect = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) + "ok"
    assert tok.decode(ep.prompt_token_ids + ep.flat_tokens()[0]) == expect


def test_episode_seed_per_sample(hf_policy: HFPolicy) -> None:
    sp = SamplingParams(seed=11)
    runs = [run_episode(hf_policy, ShellEnv(), make_task(0), max_turns=2, max_tokens_per_turn=6,
                        sampling=sp, sample_index=j) for j in (0, 0, 1)]
    flat = [r.flat_tokens()[0] for r in runs]
    assert flat[0] == flat[1] and flat[0] != flat[2]


def test_an_episode_that_fills_the_models_context_ends_instead_of_raising(
        hf_policy: HFPolicy) -> None:
    """Observations that grow the context past the model's window raised
    PromptTooLongError at the next turn, and the whole episode was dropped."""
    window = hf_policy.context_tokens
    assert window > 0
    ep = run_episode(hf_policy, ShellEnv(obs_len=window // 3), make_task(3), max_turns=50,
                     max_tokens_per_turn=4, max_total_tokens=10 * window,
                     observation_max_chars=10 * window, sampling=SamplingParams(seed=1))
    assert ep.truncated and ep.info["end"] == "token_budget", ep.info
    assert len(ep.prompt_token_ids) + len(ep.flat_tokens()[0]) <= window
    assert sum(t.trainable for t in ep.turns) >= 2
