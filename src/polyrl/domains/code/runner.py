"""The test-runner program that runs INSIDE the sandbox (stdlib only).

This file is sent as source text to ``ForkServer.run_python`` (never imported to
run model code in-process). It reads one JSON payload on stdin, executes the
candidate solution, runs every test with a per-test time limit, and writes one
result line per event to the real stdout, each prefixed with ``payload["marker"]``
so that whatever the candidate prints cannot be confused with a result:

    <marker> {"event": "compiled", "ok": true, "error": ""}
    <marker> {"event": "test", "i": 0, "ok": true, "error": "", "out": <tagged value>}
    <marker> {"event": "done"}

Lines are flushed as they are written, so results survive a kill by the sandbox.

Payload fields:
    solution: str, the candidate's module source.
    kind: "statements" (``test_module`` defines ``check(candidate)``; every top-level
        statement of its body containing an ``assert`` is one test; the others are
        setup) or "io" (``cases`` = [[args_tagged, expected_tagged], ...]).
    entry_point: name of the function under test.
    atol: absolute tolerance for float outputs ("io" kind; 0 = 1e-6 default).
    record: "io" kind only; report each output (``out``) instead of comparing.
    unordered: "io" kind only; a list/tuple output also passes when its set equals the
        expected one's (for tasks whose own asserts compare ``set(f(...))``).
    per_test_timeout_s: CPU seconds per test (and for the module itself); the wall-clock
        backstop is ``3 * per_test_timeout_s + 1``.
"""

import ast
import copy
import io
import json
import math
import signal
import sys

MAX_RECORD_CHARS = 50_000
"""Record mode drops outputs whose JSON is longer than this (keeps stdout small)."""


class _TestTimeout(BaseException):
    """Raised by SIGALRM; a BaseException so ``except Exception`` cannot swallow it."""


def _alarm(signum, frame):
    raise _TestTimeout("per-test time limit exceeded")


def encode(v):
    """Tagged JSON of a Python value: tuples, sets, dicts, complex, bytes survive."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        if math.isfinite(v):
            return v
        return {"__x": repr(v)}
    if isinstance(v, list):
        return [encode(x) for x in v]
    if isinstance(v, tuple):
        return {"__t": [encode(x) for x in v]}
    if isinstance(v, (set, frozenset)):
        key = "__s" if isinstance(v, set) else "__fs"
        return {key: sorted((encode(x) for x in v), key=repr)}
    if isinstance(v, dict):
        return {"__d": [[encode(k), encode(x)] for k, x in v.items()]}
    if isinstance(v, complex):
        return {"__c": [encode(v.real), encode(v.imag)]}
    if isinstance(v, bytes):
        return {"__b": v.decode("latin-1")}
    raise TypeError(f"cannot encode a value of type {type(v).__name__}")


class Opaque:
    """An output with no value semantics (e.g. a regex match): compared by truthiness."""

    def __init__(self, truthy):
        self.truthy = bool(truthy)

    def __eq__(self, other):
        return isinstance(other, Opaque) and other.truthy == self.truthy

    def __hash__(self):
        return hash(self.truthy)

    def __bool__(self):
        return self.truthy

    def __repr__(self):
        return f"Opaque({self.truthy})"


def encode_output(v):
    """``encode``, or an ``Opaque`` tag (its truthiness) for a value it cannot encode."""
    try:
        return encode(v)
    except TypeError:
        return {"__o": bool(v)}


def decode(v):
    """Inverse of ``encode``."""
    if isinstance(v, list):
        return [decode(x) for x in v]
    if not isinstance(v, dict):
        return v
    (tag, x), = v.items()
    if tag == "__t":
        return tuple(decode(y) for y in x)
    if tag == "__s":
        return {decode(y) for y in x}
    if tag == "__fs":
        return frozenset(decode(y) for y in x)
    if tag == "__d":
        return {decode(k): decode(y) for k, y in x}
    if tag == "__c":
        return complex(decode(x[0]), decode(x[1]))
    if tag == "__b":
        return x.encode("latin-1")
    if tag == "__x":
        return float(x)
    if tag == "__o":
        return Opaque(x)
    raise ValueError(f"unknown tag {tag!r}")


def outputs_equal(out, exp, atol):
    """True when ``out`` matches ``exp``; floats compare within ``atol`` (and rel 1e-7)."""
    if isinstance(exp, Opaque):
        try:
            return bool(out) == exp.truthy
        except Exception:
            return False
    if isinstance(exp, float) or (isinstance(out, float) and isinstance(exp, int)
                                  and not isinstance(exp, bool)):
        if not isinstance(out, (int, float)) or isinstance(out, bool):
            return False
        if math.isnan(exp):
            return math.isnan(out)
        return math.isclose(out, exp, rel_tol=1e-7, abs_tol=atol if atol > 0 else 1e-6)
    if isinstance(exp, (list, tuple)) and type(out) is type(exp) and len(out) == len(exp):
        return all(outputs_equal(o, e, atol) for o, e in zip(out, exp, strict=True))
    try:
        return bool(out == exp)
    except Exception:
        return False


def _same_set(out, exp):
    """Order-free comparison (tasks whose own asserts compare ``set(f(...))``)."""
    try:
        return isinstance(out, (list, tuple, set, frozenset)) and set(out) == set(exp)
    except TypeError:
        return False


def _emit(real, marker, obj):
    real.write(marker + " " + json.dumps(obj) + "\n")
    real.flush()


def _timed(fn, timeout_s):
    """Run ``fn`` with ``timeout_s`` of CPU time (robust to a loaded host) and a wall-clock
    backstop of ``3 * timeout_s + 1`` seconds (for code that sleeps or blocks)."""
    signal.setitimer(signal.ITIMER_PROF, timeout_s)
    signal.setitimer(signal.ITIMER_REAL, 3 * timeout_s + 1)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)


def _err(e):
    return (type(e).__name__ + ": " + str(e))[:300]


def _statement_tests(test_src):
    """Split ``check``'s body into (is_test, code object) pairs, in order."""
    tree = ast.parse(test_src)
    check = None
    prelude = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            check = node
        else:
            prelude.append(node)
    if check is None:
        raise ValueError("test module defines no check(candidate)")
    arg = check.args.args[0].arg if check.args.args else "candidate"
    steps = []
    for stmt in check.body:
        is_test = any(isinstance(n, ast.Assert) for n in ast.walk(stmt))
        mod = ast.Module(body=[stmt], type_ignores=[])
        steps.append((is_test, compile(mod, "<test>", "exec")))
    if not any(t for t, _ in steps):  # no assert at all: the whole check is one test
        steps = [(True, compile(ast.Module(body=check.body, type_ignores=[]), "<test>", "exec"))]
    pre = compile(ast.Module(body=prelude, type_ignores=[]), "<test>", "exec")
    return arg, pre, steps


def main():
    """Read the payload on stdin, run the solution and its tests, print marked results."""
    payload = json.loads(sys.stdin.read())
    marker = payload["marker"]
    timeout_s = float(payload.get("per_test_timeout_s", 3.0))
    real = sys.stdout
    sys.stdout = io.StringIO()  # what the candidate prints goes nowhere
    signal.signal(signal.SIGALRM, _alarm)
    signal.signal(signal.SIGPROF, _alarm)
    sys.setrecursionlimit(10000)
    ns = {"__name__": "__main__"}
    kind = payload["kind"]
    if kind == "statements":
        arg, pre, steps = _statement_tests(payload["test_module"])
        n_tests = sum(1 for t, _ in steps if t)
    else:
        cases = payload["cases"]
        n_tests = len(cases)
    try:
        code = compile(payload["solution"], "<solution>", "exec")
        _timed(lambda: exec(code, ns), timeout_s)
        fn = ns[payload["entry_point"]]
        if not callable(fn):
            raise TypeError(payload["entry_point"] + " is not callable")
    except BaseException as e:  # noqa: BLE001 - any failure of the candidate is a verdict
        _emit(real, marker, {"event": "compiled", "ok": False, "error": _err(e)})
        for i in range(n_tests):
            _emit(real, marker, {"event": "test", "i": i, "ok": False, "error": "not compiled"})
        _emit(real, marker, {"event": "done"})
        return
    _emit(real, marker, {"event": "compiled", "ok": True, "error": ""})
    if kind == "statements":
        tns = ns  # as the benchmark does: tests may call the solution's helpers
        exec(pre, tns)
        tns[arg] = fn
        i = 0
        broken = ""
        for is_test, step in steps:
            if broken:
                if is_test:
                    _emit(real, marker, {"event": "test", "i": i, "ok": False, "error": broken})
                    i += 1
                continue
            try:
                _timed(lambda step=step: exec(step, tns), timeout_s)
                ok, error = True, ""
            except BaseException as e:  # noqa: BLE001
                ok, error = False, _err(e)
                if not is_test:
                    broken = "setup failed: " + error
            if is_test:
                _emit(real, marker, {"event": "test", "i": i, "ok": ok, "error": error})
                i += 1
    else:
        atol = float(payload.get("atol") or 0.0)
        record = bool(payload.get("record"))
        unordered = bool(payload.get("unordered"))
        for i, (args, expected) in enumerate(cases):
            line = {"event": "test", "i": i, "ok": False, "error": ""}
            try:
                args = copy.deepcopy(decode(args))
                out = _timed(lambda args=args: fn(*args), timeout_s)
                if record:
                    tagged = encode_output(out)
                    text = json.dumps(tagged)
                    if len(text) > MAX_RECORD_CHARS:
                        raise ValueError(f"output too large to record ({len(text)} chars)")
                    line["out"] = tagged
                    line["ok"] = True
                else:
                    if isinstance(out, (int, float)) and not isinstance(out, bool):
                        try:
                            if math.isfinite(out):
                                line["num"] = float(out)
                        except OverflowError:
                            pass
                    exp = decode(expected)
                    line["ok"] = outputs_equal(out, exp, atol)
                    if not line["ok"] and unordered:
                        line["ok"] = _same_set(out, exp)
                    if not line["ok"]:
                        line["error"] = "wrong output: " + repr(out)[:100]
            except BaseException as e:  # noqa: BLE001
                line["error"] = _err(e)
            _emit(real, marker, line)
    _emit(real, marker, {"event": "done"})


if __name__ == "__main__":
    main()
