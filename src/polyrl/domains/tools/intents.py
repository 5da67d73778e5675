"""The function library of ``tools/gen-v1``: tool specs and request generators.

Each ``Intent`` owns one JSON-schema tool spec and a ``make(rng, hard)`` that returns
``(request_phrase, accepted_arguments)``; ``hard=True`` phrases values so they must be
derived (times in words, Fahrenheit to Celsius, language names to codes, ...).
Accepted arguments follow the BFCL convention ``{arg: [accepted values]}``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Made = tuple[str, dict[str, list[Any]]]

CITIES = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Delhi", "Quito", "Rome", "Seoul", "Accra"]
AIRPORTS = {"Paris": "CDG", "Tokyo": "HND", "Lima": "LIM", "Oslo": "OSL", "Cairo": "CAI",
            "Delhi": "DEL", "Quito": "UIO", "Rome": "FCO", "Seoul": "ICN", "Accra": "ACC"}
LANGS = {"German": "de", "French": "fr", "Spanish": "es", "Italian": "it", "Dutch": "nl"}
PHRASES = ["good morning", "thank you", "where is the station", "see you soon", "two coffees"]
NAMES = ["ann", "bob", "chen", "dara", "eli", "fay", "gus", "hana"]
WORDS_PRODUCTS = ["kettle", "lamp", "stapler", "mug", "router", "drill", "blender", "tripod",
                  "backpack", "monitor", "headset", "toaster"]
WORDS = {0: "o'clock", 15: "quarter past", 30: "half past", 45: "quarter to"}


def _spec(name: str, desc: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"name": name, "description": desc,
            "parameters": {"type": "object", "properties": props, "required": required}}


INT, NUM, STR = {"type": "integer"}, {"type": "number"}, {"type": "string"}


@dataclass(frozen=True)
class Intent:
    """One tool spec and a generator of requests for it."""

    spec: dict[str, Any]
    make: Callable[[random.Random, bool], Made]

    @property
    def name(self) -> str:
        """The tool's function name."""
        return self.spec["name"]


def _arith(op: str, sym: str, verbs: list[str]) -> Intent:
    def make(rng: random.Random, hard: bool) -> Made:
        a, b = rng.randint(0, 9), rng.randint(0, 9)  # single digits: answers <= 12 bytes
        return rng.choice(verbs).format(a=a, b=b), {"a": [a], "b": [b]}

    return Intent(_spec(op, f"returns a{sym}b", {"a": INT, "b": INT}, ["a", "b"]), make)


ARITH = [
    _arith("add", "+", ["add {a} and {b}", "sum of {a} and {b}", "{a} plus {b}"]),
    _arith("sub", "-", ["{a} minus {b}", "subtract {b} from {a}"]),
    _arith("mul", "*", ["multiply {a} by {b}", "{a} times {b}"]),
]


def _weather(rng: random.Random, hard: bool) -> Made:
    city, unit = rng.choice(CITIES), rng.choice(["c", "f"])
    word = {"c": "Celsius", "f": "Fahrenheit"}[unit]
    return f"get the weather in {city} in {word}", {"city": [city], "unit": [unit]}


def _alarm(rng: random.Random, hard: bool) -> Made:
    hour, minute = rng.randint(1, 11), rng.choice([0, 15, 30, 45])
    pm = rng.random() < 0.5
    h24 = hour + 12 if pm else hour
    if not hard:
        return f"set an alarm at {h24:02d}:{minute:02d}", {"hour": [h24], "minute": [minute]}
    shown = hour + 1 if minute == 45 else hour
    spoken = f"{shown} {WORDS[minute]}" if minute == 0 else f"{WORDS[minute]} {shown}"
    part = "in the evening" if pm else "in the morning"
    return f"set an alarm for {spoken} {part}", {"hour": [h24], "minute": [minute]}


def _currency(rng: random.Random, hard: bool) -> Made:
    src, dst = rng.sample(["USD", "EUR", "JPY", "GBP", "INR"], 2)
    amount = rng.randint(2, 400) * 5
    return f"convert {amount} {src} to {dst}", {"amount": [amount], "src": [src], "dst": [dst]}


def _translate(rng: random.Random, hard: bool) -> Made:
    lang, text = rng.choice(sorted(LANGS)), rng.choice(PHRASES)
    return f"translate '{text}' into {lang}", {"text": [text], "target": [LANGS[lang]]}


def _thermostat(rng: random.Random, hard: bool) -> Made:
    c = rng.randint(16, 26)
    if not hard:
        return f"set the thermostat to {c} C", {"celsius": [c]}
    f = c * 9 / 5 + 32
    return f"set the thermostat to {f:g} degrees Fahrenheit", {"celsius": [c]}


def _email(rng: random.Random, hard: bool) -> Made:
    who, topic = rng.choice(NAMES), rng.choice(["budget", "launch", "report", "trip"])
    args: dict[str, list[Any]] = {"to": [f"{who}@example.com"], "subject": [topic]}
    if hard:
        args["urgent"] = [True]
        return f"email {who}@example.com urgently, subject '{topic}'", args
    args["urgent"] = [False, ""]
    return f"email {who}@example.com with subject '{topic}'", args


def _flights(rng: random.Random, hard: bool) -> Made:
    a, b = rng.sample(CITIES, 2)
    day, n = rng.randint(1, 28), rng.randint(1, 4)
    date = f"2025-03-{day:02d}"
    args: dict[str, list[Any]] = {"origin": [AIRPORTS[a]], "destination": [AIRPORTS[b]],
                                  "date": [date], "passengers": [n] if n > 1 else [1, ""]}
    who = f"{n} people" if n > 1 else "one person"
    if hard:
        return f"find flights from {a} to {b} on March {day}, 2025 for {who}", args
    return f"find flights {AIRPORTS[a]} to {AIRPORTS[b]} on {date} for {who}", args


SIMPLE = [
    Intent(_spec("get_weather", "current weather", {"city": STR, "unit": {
        "type": "string", "enum": ["c", "f"]}}, ["city", "unit"]), _weather),
    Intent(_spec("set_alarm", "set an alarm (24h clock)", {"hour": INT, "minute": INT},
                 ["hour", "minute"]), _alarm),
    Intent(_spec("convert_currency", "convert money between ISO currency codes",
                 {"amount": NUM, "src": STR, "dst": STR}, ["amount", "src", "dst"]), _currency),
    Intent(_spec("translate", "translate text; target is an ISO 639-1 code", {
        "text": STR, "target": {"type": "string", "enum": sorted(LANGS.values())}},
        ["text", "target"]), _translate),
    Intent(_spec("set_thermostat", "set the target temperature in Celsius",
                 {"celsius": NUM}, ["celsius"]), _thermostat),
    Intent(_spec("send_email", "send an email", {"to": STR, "subject": STR, "urgent": {
        "type": "boolean", "default": False}}, ["to", "subject"]), _email),
    Intent(_spec("search_flights", "find flights; airports are IATA codes, date YYYY-MM-DD", {
        "origin": STR, "destination": STR, "date": STR,
        "passengers": {"type": "integer", "minimum": 1, "default": 1}},
        ["origin", "destination", "date"]), _flights),
]

DISTRACTORS = [
    _spec("get_forecast", "weather forecast for the next days", {"city": STR, "days": INT},
          ["city", "days"]),
    _spec("cancel_alarm", "cancel an alarm by id", {"alarm_id": INT}, ["alarm_id"]),
    _spec("get_exchange_rate", "exchange rate between two currencies", {"src": STR, "dst": STR},
          ["src", "dst"]),
    _spec("detect_language", "detect the language of a text", {"text": STR}, ["text"]),
    _spec("book_hotel", "book a hotel room", {"city": STR, "nights": INT}, ["city", "nights"]),
]
