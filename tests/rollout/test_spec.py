"""Policy specs on the command line: make_policy and the vllm import guard."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyrl.errors import ConfigError
from polyrl.rollout import HFPolicy, make_policy


def test_specs(tiny_dir: Path) -> None:
    policy = make_policy(f"hf:{tiny_dir}", device="cpu")
    assert isinstance(policy, HFPolicy) and policy.name == f"hf:{tiny_dir}"
    for bad, match in [("gpt", "unknown policy kind"), ("hf:", "missing"),
                       ("openai:localhost#m", "openai:http"), ("openai:http://x:1", "MODEL"),
                       (f"hf:{tiny_dir}/nope", "cannot load")]:
        with pytest.raises(ConfigError, match=match):
            make_policy(bad)


def test_home_relative_model_dir_loads(tiny_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tiny_dir.parent))
    policy = make_policy(f"hf:~/{tiny_dir.name}", device="cpu")
    assert isinstance(policy, HFPolicy) and policy.name == f"hf:{tiny_dir}"
    with pytest.raises(ConfigError, match="no such directory"):
        make_policy("hf:~/no-such-model")


def test_vllm_guard_is_clear() -> None:
    from polyrl.rollout.vllm_backend import vllm_unavailable_reason

    reason = vllm_unavailable_reason()
    if reason is None:
        pytest.skip("vllm and CUDA available here")
    with pytest.raises(ConfigError, match="vllm"):
        make_policy("vllm:some/model")
