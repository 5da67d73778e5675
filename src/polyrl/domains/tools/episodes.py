"""``tools/episodes-v1``: multi-turn tool use against a shop world run in the sandbox.

Each turn the policy sends tool calls (any form ``calls.parse_calls`` reads; several
calls in one turn run in order) or a final answer ``{"answer": ...}`` /
``ANSWER: ...``. Calls are validated against the JSON schemas; valid ones run in the
sandbox (a ForkServer child executes ``world.TOOL_SOURCE`` with the world and call on
stdin) and their JSON results come back as the observation. The episode ends on an
answer or ``done`` (terminated) or after ``max_turns`` turns (truncated).

Reward = 0.8 * answer_correct + 0.2 * coverage, where coverage is the number of the
oracle's calls (name and arguments) the policy made validly over the larger of the
oracle's count and the distinct valid calls it made: missing and surplus calls both
cost, as in ``tools/gen-v1``'s ``call_match``. (Over the oracle's count alone, spraying
blind lookups, ``get_customer`` for every id 10..98 and ``get_discount`` for every tier,
earned the lookups the task needed without reading a result: +0.05 on average with no
answer.) An episode with no calls and no answer scores 0. Money answers match within half a cent of the exact value.
An answer is read with surrounding quotes and a trailing ``.``/``!`` dropped; a number
may carry ``$``, thousands commas and a currency word (``USD``, ``dollars``).

Splits: a task is ``test`` when ``crc32(question) % 5 == 0``, else ``train``. The split
follows the prompt (the question; the tool schemas are the same for every task), not
the hidden world: two worlds asked the same question ("What is the name of the
customer who placed order 6443?") are the same prompt, and hashing question + world
put 18 such prompts in both splits in 3 x 400 draws of each.
"""

from __future__ import annotations

import json
import random
import re
import threading
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

from polyrl.domains.base import Answer, Domain, Env, procedural_levels
from polyrl.domains.tools.calls import ToolCall, parse_calls
from polyrl.domains.tools.matching import validate_call
from polyrl.domains.tools.world import TOOL_SOURCE, TOOL_SPECS, make_question, make_world
from polyrl.errors import SandboxError
from polyrl.types import Episode, Score, Task

DOMAIN_ID = "tools/episodes-v1"
DONE = "done"
_ANSWER_RE = re.compile(r"^\s*ANSWER\s*:\s*(.+?)\s*$", re.M | re.I)
_LOCK = threading.Lock()
_SERVER: Any = None


def default_server() -> Any:
    """The shared ForkServer running tool implementations (strict limits)."""
    global _SERVER
    with _LOCK:
        if _SERVER is None:
            from polyrl.sandbox import ForkServer

            _SERVER = ForkServer(limits="strict")
        return _SERVER


def parse_answer(action: str) -> str | None:
    """The final answer in ``action`` (``{"answer": x}`` or ``ANSWER: x``), else None."""
    text = action.strip()
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and "answer" in obj:
            return str(obj["answer"])
    m = _ANSWER_RE.search(text)
    return m.group(1) if m else None


_CURRENCY_RE = re.compile(r"(?i)\b(?:usd|us\s?dollars?|dollars?)\b|\$")
_MONEY_RE = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\.\d+")


def _bare(text: str) -> str:
    """``text`` without surrounding spaces and quotes and a trailing ``.`` or ``!``."""
    prev = None
    while prev != text:
        prev = text
        text = text.strip().strip("\"'`").rstrip(".!")
    return text


def answer_matches(pred: str, task: Task) -> bool:
    """Numbers within half a cent of the exact value; text case-insensitively (both
    read as in the module docstring: ``"94.94 USD."`` is 94.94, ``'"Gus"'`` is Gus)."""
    exact = task.metadata.get("exact")
    if exact is not None:
        text = _bare(_CURRENCY_RE.sub(" ", _bare(pred))).replace(" ", "")
        if not _MONEY_RE.fullmatch(text):
            return False
        return abs(float(text.replace(",", "")) - exact) <= 0.005 + 1e-9
    return _bare(pred).lower() == str(task.metadata["answer"]).lower()


def _key(name: str, args: dict[str, Any]) -> str:
    return json.dumps([name, args], sort_keys=True)


class ToolEpisodeEnv(Env):
    """One shop question; see module docstring."""

    done_action = DONE

    def __init__(self, task: Task, server: Any = None) -> None:
        self.task = task
        self.server = server
        self.turns = 0
        self.made: set[str] = set()
        self.finished = False

    def reset(self, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Start over; returns the question with the tool specs."""
        self.turns, self.made, self.finished = 0, set(), False
        return self.task.prompt[0]["content"], {"max_turns": self.task.metadata["max_turns"]}

    def _run(self, call: ToolCall) -> str:
        server = self.server or default_server()
        req = {"world": self.task.metadata["world"], "name": call.name,
               "arguments": call.arguments}
        res = server.run_python(TOOL_SOURCE, stdin=json.dumps(req))
        if res.error:
            raise SandboxError(f"tool {call.name} failed in the sandbox: {res.error}: "
                               f"{res.error_message}")
        if not res.ok:
            return json.dumps({"error": f"tool crashed: {res.stderr.strip()[-200:]}"})
        return res.stdout.strip()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Run the calls in ``action`` or finish on an answer / ``done``.

        Raises:
            SandboxError: a tool run failed in the sandbox.
        """
        if self.finished:
            raise RuntimeError("the episode is over; call reset()")
        answer = parse_answer(action)
        if answer is not None or action.strip().lower() == DONE:
            return self._finish(answer, terminated=True)
        self.turns += 1
        calls = parse_calls(action) or []
        if not calls:
            obs = 'No tool call or answer found. Send calls as JSON, or {"answer": ...}.'
        else:
            lines = []
            for call in calls[:8]:
                why = validate_call(call, TOOL_SPECS)
                if why:
                    lines.append(json.dumps({"call": call.name, "error": f"invalid call: {why}"}))
                    continue
                self.made.add(_key(call.name, call.arguments))
                lines.append(json.dumps({"call": call.name, "result": json.loads(self._run(call))}))
            obs = "\n".join(lines)
        if self.turns >= self.task.metadata["max_turns"]:
            final = self._finish(None, terminated=False)
            return (obs + "\n" + final[0], *final[1:])
        return obs, 0.0, False, False, {}

    def _finish(self, answer: str | None,
                *, terminated: bool) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.finished = True
        meta = self.task.metadata
        correct = answer is not None and answer_matches(answer, self.task)
        needed = {_key(n, a) for n, a in meta["oracle_calls"]}
        coverage = len(needed & self.made) / max(len(needed), len(self.made))
        reward = 0.8 * float(correct) + 0.2 * coverage
        score = Score(reward=reward, components={"answer_correct": float(correct),
                      "coverage": coverage, "turns": float(self.turns)}, passed=correct)
        return "[episode over]", reward, terminated, not terminated, {"score": score}


def make_task(difficulty: int, index: int, seed: int) -> Task:
    """Episode task ``index`` of ``difficulty`` (split by a hash of the question: the prompt)."""
    rng = random.Random(f"episodes:{seed}:{index}:{difficulty}")
    world = make_world(rng)
    question, answer, calls = make_question(rng, world, difficulty)
    prompt = (f"{question}\nTools (JSON schema): {json.dumps(TOOL_SPECS, separators=(',', ':'))}\n"
              'Each turn send tool call(s) as JSON [{"name": ..., "arguments": {...}}]; results '
              'come back. When you know it, reply {"answer": <value>}.')
    exact = None
    if difficulty >= 3 or difficulty == 1:
        exact = float(answer)
    return Task(
        id=f"tools-ep-s{seed}-d{difficulty}-{index}",
        domain=DOMAIN_ID,
        split="test" if zlib.crc32(question.encode()) % 5 == 0 else "train",
        difficulty=difficulty,
        prompt=[{"role": "user", "content": prompt}],
        reference=json.dumps({"answer": answer}),
        metadata={"world": world, "answer": answer, "exact": exact,
                  "oracle_calls": [[n, a] for n, a in calls],
                  "max_turns": 4 + 3 * difficulty},
    )


class ToolEpisodesDomain(Domain):
    """Multi-turn tool use over a generated shop (see module docstring).

    Args:
        server: anything with ``run_python(code, stdin=...) -> ExecResult``; default a
            shared ``ForkServer``.
    """

    id = DOMAIN_ID
    family = "tools"
    description = "multi-turn tool episodes: look up orders/products/discounts, answer"
    multi_turn = True
    binary = True

    def __init__(self, server: Any = None) -> None:
        self.server = server

    def tasks(
        self,
        split: str,
        *,
        difficulty: int | Sequence[int] | None = None,
        n: int | None = None,
        seed: int = 0,
    ) -> Iterator[Task]:
        """``n`` tasks of ``split``, cycling through ``difficulty`` (default 1..5)."""
        levels = procedural_levels(self.id, split, difficulty, n)
        made, index = 0, 0
        while made < n:
            task = make_task(levels[made % len(levels)], index, seed)
            index += 1
            if task.split == split:
                made += 1
                yield task

    def env(self, task: Task) -> Env:
        """A fresh ``ToolEpisodeEnv``."""
        return ToolEpisodeEnv(task, self.server)

    def oracle_actions(self, task: Task) -> list[str]:
        """One JSON call per turn (the oracle's lookups), then the answer."""
        calls = [json.dumps([{"name": n, "arguments": a}]) for n, a in task.metadata["oracle_calls"]]
        return [*calls, task.reference]

    def score(self, task: Task, answer: Answer) -> Score:
        """Replay the episode's assistant turns (or one text action) in a fresh env.

        Raises:
            SandboxError: a tool run failed in the sandbox.
        """
        if isinstance(answer, Episode):
            actions = [t.content for t in answer.turns if t.role == "assistant"]
        else:
            text = answer if isinstance(answer, str) else answer.text
            actions = [text] if text.strip() else []
        env = self.env(task)
        env.reset()
        for action in [*actions, DONE]:
            _, _, term, trunc, info = env.step(action)
            if term or trunc:
                return info["score"]
        raise AssertionError("unreachable: done always ends the episode")
