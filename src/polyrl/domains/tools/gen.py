"""``tools/gen-v1``: procedurally generated function-calling tasks, difficulty 1..5.

1. one arithmetic tool shown as a compact signature; one call in Python syntax.
   Prompt <= ~100 bytes, answer 12 bytes (``add(a=3,b=4)``): learnable by the
   byte-level quickstart model.
2. two or three tools (compact signatures), pick the right one; strings and enums.
3. three or four tools as JSON schema; values phrased to be derived (times in
   words, Fahrenheit, city names to IATA codes); optional arguments; JSON answer.
4. five tools; two or three independent calls in one request (parallel, graded
   order-insensitively).
5. seven tools with look-alike distractors; an ordered plan of three calls whose
   values need date/time arithmetic (the day after a date in a leap year, an alarm
   N minutes before a start time) and a nested attendee list.

Train and test are disjoint by construction: a task belongs to the split chosen by
a hash of its prompt, and generation skips tasks of the other split.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

from polyrl.domains.base import Answer, Domain, answer_text, procedural_levels
from polyrl.domains.tools.calls import format_call
from polyrl.domains.tools.intents import ARITH, DISTRACTORS, NAMES, SIMPLE, Intent
from polyrl.domains.tools.matching import oracle_calls
from polyrl.domains.tools.prompting import compact_signature, tools_system_prompt
from polyrl.domains.tools.rubric import score_calls
from polyrl.types import Score, Task

DOMAIN_ID = "tools/gen-v1"
_PY_HINT = "Reply with the call only, like f(x=1)."
_EVENT = {"name": "create_event", "description": "create a calendar event", "parameters": {
    "type": "object", "required": ["title", "date", "start", "duration_min", "attendees"],
    "properties": {"title": {"type": "string"}, "date": {"type": "string",
                   "description": "YYYY-MM-DD"}, "start": {"type": "string",
                   "description": "HH:MM, 24h"}, "duration_min": {"type": "integer"},
                   "attendees": {"type": "array", "items": {"type": "object", "properties": {
                       "email": {"type": "string"}, "optional": {"type": "boolean"}},
                       "required": ["email", "optional"]}}}}}


def split_of(prompt_text: str) -> str:
    """``"test"`` for one prompt in five (by crc32), else ``"train"``."""
    return "test" if zlib.crc32(prompt_text.encode()) % 5 == 0 else "train"


def _specs(intents: list[Intent]) -> list[dict[str, Any]]:
    return [i.spec for i in intents]


def _compact(rng: random.Random, k: int, pool: list[Intent]) -> tuple[str, list, list]:
    shown = rng.sample(pool, k)
    target = shown[0]
    rng.shuffle(shown)
    phrase, args = target.make(rng, False)
    if k == 1:
        text = f"Tool: {compact_signature(target.spec)} {target.spec['description']}\n"
    else:
        text = "Tools: " + " ".join(compact_signature(i.spec) for i in shown) + "\n"
    text += f"Request: {phrase}\n{_PY_HINT}"
    return text, _specs(shown), [{"name": target.name, "arguments": args}]


def _json_task(rng: random.Random, n_calls: int, n_tools: int) -> tuple[str, list, list]:
    targets = rng.sample(SIMPLE, n_calls) if n_calls > 1 else [rng.choice(SIMPLE)]
    others = [i for i in SIMPLE if i not in targets]
    shown = targets + rng.sample(others, n_tools - n_calls)
    rng.shuffle(shown)
    expected, phrases = [], []
    for t in targets:
        phrase, args = t.make(rng, True)
        phrases.append(phrase)
        expected.append({"name": t.name, "arguments": args})
    request = "Please " + "; and ".join(phrases) + "."
    return request, _specs(shown), expected


def _plan_task(rng: random.Random) -> tuple[str, list, list]:
    """Difficulty 5: ordered create_event -> set_alarm -> send_email with derived values."""
    year = rng.choice([2024, 2028, 2025])
    base = dt.date(year, 2, rng.choice([27, 28]))
    offset = rng.choice([1, 2])
    date = base + dt.timedelta(days=offset)
    start = dt.datetime.combine(date, dt.time(rng.randint(8, 16), rng.choice([0, 15, 30, 45])))
    dur = rng.choice([45, 90, 150])
    lead = rng.choice([10, 20, 35, 50])
    alarm = start - dt.timedelta(minutes=lead)
    title = rng.choice(["design review", "budget sync", "retro", "kickoff"])
    people = rng.sample(NAMES, 3)
    dur_words = {45: "three quarters of an hour", 90: "an hour and a half",
                 150: "two and a half hours"}[dur]
    when = "the day after" if offset == 1 else "two days after"
    request = (
        f"Schedule '{title}' {when} {base.isoformat()} starting "
        f"{start.strftime('%I:%M %p').lstrip('0')} for {dur_words}, with {people[0]} and "
        f"{people[1]} (required) and {people[2]} (optional), all @example.com. Then set an alarm "
        f"{lead} minutes before it starts, then email {people[0]} with the subject "
        f"'<title> on <date>'. Make the calls in that order."
    )
    attendees = [[{"email": [f"{p}@example.com"], "optional": [i == 2]}
                  for i, p in enumerate(people)]]
    expected = [
        {"name": "create_event", "arguments": {
            "title": [title], "date": [date.isoformat()], "start": [start.strftime("%H:%M")],
            "duration_min": [dur], "attendees": attendees}},
        {"name": "set_alarm", "arguments": {"hour": [alarm.hour], "minute": [alarm.minute]}},
        {"name": "send_email", "arguments": {
            "to": [f"{people[0]}@example.com"], "subject": [f"{title} on {date.isoformat()}"],
            "urgent": [False, ""]}},
    ]
    names = {"set_alarm", "send_email"}
    shown = [_EVENT] + [i.spec for i in SIMPLE if i.name in names] + rng.sample(DISTRACTORS, 4)
    rng.shuffle(shown)
    return request, shown, expected


def make_task(rng: random.Random, difficulty: int, index: int, seed: int) -> Task:
    """One task of ``difficulty`` (1..5) drawn from ``rng`` (split set by the caller)."""
    if difficulty == 1:
        text, specs, expected = _compact(rng, 1, ARITH)
    elif difficulty == 2:
        text, specs, expected = _compact(rng, rng.choice([2, 3]), SIMPLE)
    elif difficulty in (3, 4, 5):
        request, specs, expected = (
            _json_task(rng, 1, rng.choice([3, 4])) if difficulty == 3
            else _json_task(rng, rng.choice([2, 3]), 5) if difficulty == 4
            else _plan_task(rng)
        )
        text = tools_system_prompt(specs) + "\nRequest: " + request
    else:
        raise ValueError(f"difficulty must be in 1..5, got {difficulty}")
    calls = oracle_calls(expected, specs)
    if difficulty <= 2:
        reference = format_call(calls[0])
    else:
        reference = json.dumps([c.to_json() for c in calls], separators=(",", ":"))
    return Task(
        id=f"tools-gen-s{seed}-d{difficulty}-{index}",
        domain=DOMAIN_ID,
        split=split_of(text),
        difficulty=difficulty,
        prompt=[{"role": "user", "content": text}],
        reference=reference,
        metadata={"tools": specs, "expected": expected, "ordered": difficulty == 5},
    )


class ToolsGenDomain(Domain):
    """Generated function-calling tasks with a dense reward (``tools.rubric``)."""

    id = DOMAIN_ID
    family = "tools"
    description = "generated function calling: choose tools, fill arguments, parallel/ordered"
    binary = True

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
            level = levels[made % len(levels)]
            task = make_task(random.Random(f"{seed}:{index}:{level}"), level, index, seed)
            index += 1
            if task.split == split:
                made += 1
                yield task

    def score(self, task: Task, answer: Answer) -> Score:
        """Dense reward (parsed 0.1, schema_valid 0.2, call_match 0.7); ``passed`` = exact."""
        return score_calls(task, answer_text(answer))

