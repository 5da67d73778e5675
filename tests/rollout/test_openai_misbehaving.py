"""OpenAIPolicy against a misbehaving HTTP server on 127.0.0.1 (break-it).

Every server fault must end as a typed polyrl error (transient ones retried a
bounded number of times, honouring Retry-After), never as a raw stdlib
exception, a hang past ``timeout_s``, or a completion scored as if valid.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from polyrl.errors import ConfigError, PolicyServerError
from polyrl.rollout import OpenAIPolicy, SamplingParams, run_episode
from polyrl.types import Episode
from tests.rollout.conftest import make_task

GOOD = {"choices": [{"message": {"content": "hello"}, "finish_reason": "stop",
                     "logprobs": {"content": [{"token": "hello", "logprob": -0.5}]}}]}
ANSWERS: dict[str, object] = {
    "nullchoice": {"choices": [None]},
    "nullmsg": {"choices": [{"message": None, "finish_reason": "stop"}]},
    "notext": {"choices": [{"index": 0, "finish_reason": "stop"}]},
    "abort": {"choices": [{"message": {"content": "hal"}, "finish_reason": "abort"}]},
    "nologprob": {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop",
                               "logprobs": {"content": [{"token": "hi"}]}}]},
    "nanlp": {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop",
                           "logprobs": {"content": [{"token": "hi", "logprob": float("nan")}]}}]},
    "poslp": {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop",
                           "logprobs": {"content": [{"token": "hi", "logprob": 2.5}]}}]},
    "lpcount": {"choices": [{"text": "abc", "finish_reason": "stop",
                             "logprobs": {"tokens": ["a", "b", "c"], "token_logprobs": [-1.0, -2.0]}}]},
    "badtokid": {"choices": [{"text": "hi", "finish_reason": "stop",
                              "logprobs": {"tokens": ["token_id:abc"], "token_logprobs": [-1.0]}}]},
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hits: dict[str, list[float]] = {}

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, body: bytes, headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        self._send(200, json.dumps({"choices": [{"message": {"content": "via GET"},
                                                 "finish_reason": "stop"}]}).encode())

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        mode = self.path.split("/")[1]
        self.hits.setdefault(mode, []).append(time.monotonic())
        body = json.dumps(GOOD).encode()
        if mode in ANSWERS:
            return self._send(200, json.dumps(ANSWERS[mode]).encode())
        if mode == "nonutf8":
            return self._send(200, b'{"choices":[{"text":"\xff","finish_reason":"stop"}]}')
        if mode == "deep":
            return self._send(200, b"[" * 50000 + b"]" * 50000)
        if mode == "badstatus":
            self.wfile.write(b"HELLO\r\n\r\n")
            self.close_connection = True
            return None
        if mode == "short":  # the server dies mid-body (clean close)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body) + 100))
            self.end_headers()
            self.wfile.write(body[:25])
            self.close_connection = True
            return None
        if mode == "drip":  # each byte in time, the whole answer far too late
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for b in body:
                self.wfile.write(bytes([b]))
                self.wfile.flush()
                time.sleep(0.05)
            return None
        if mode == "hdrdrip":  # status line in time, then one header line every 0.1 s
            try:
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                for _ in range(40):
                    self.wfile.flush()
                    time.sleep(0.1)
                    self.wfile.write(b"X-Wait: 1\r\n")
                self.wfile.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            except OSError:  # the client hung up at its deadline
                pass
            self.close_connection = True
            return None
        if mode == "r429":
            return self._send(429, b'{"error":"slow down"}', (("Retry-After", "0.6"),))
        if mode == "redirect":
            port = self.server.server_address[1]
            return self._send(302, b"", (("Location", f"http://127.0.0.1:{port}/good"),))
        return self._send(200, body)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _policy(url: str, mode: str, **kw: object) -> OpenAIPolicy:
    kw = {"timeout_s": 2.0, "max_retries": 1, "backoff_s": 0.01, **kw}
    return OpenAIPolicy(f"{url}/{mode}", "m", **kw)  # type: ignore[arg-type]


SP = SamplingParams(max_tokens=4)


@pytest.mark.parametrize("mode", ["short", "badstatus", "nonutf8", "deep"])
def test_broken_transport_is_a_retried_policy_server_error(url: str, mode: str) -> None:
    _Handler.hits.pop(mode, None)
    with pytest.raises(PolicyServerError, match="failed after 2 attempts"):
        _policy(url, mode).generate([make_task(0)], 1, SP)
    assert len(_Handler.hits[mode]) == 2


@pytest.mark.parametrize("mode", ["nullchoice", "nullmsg", "notext", "abort", "nologprob",
                                  "nanlp", "poslp", "lpcount"])
def test_malformed_answer_is_never_a_completion(url: str, mode: str) -> None:
    with pytest.raises(PolicyServerError):
        _policy(url, mode).generate([make_task(0)], 1, SP)


def test_token_ids_asked_but_not_given_is_explicit(url: str) -> None:
    with pytest.raises(ConfigError, match="token id"):
        _policy(url, "good", token_ids=True).generate([make_task(0)], 1, SP)
    with pytest.raises(PolicyServerError):
        _policy(url, "badtokid", token_ids=True).generate([make_task(0)], 1, SP)


def test_timeout_bounds_the_whole_request(url: str) -> None:
    t0 = time.monotonic()
    with pytest.raises(PolicyServerError, match="timed out"):
        _policy(url, "drip", timeout_s=0.5, max_retries=0).generate([make_task(0)], 1, SP)
    assert time.monotonic() - t0 < 2.0  # the drip takes ~7 s


def test_timeout_bounds_a_server_that_drips_its_headers(url: str) -> None:
    """Each header line came within the socket timeout, so urlopen waited for all
    of them (4 s here, as long as the server liked) before the body loop ever
    looked at the clock; now the connection is cut at timeout_s."""
    t0 = time.monotonic()
    with pytest.raises(PolicyServerError, match="timed out"):
        _policy(url, "hdrdrip", timeout_s=0.5, max_retries=0).generate([make_task(0)], 1, SP)
    assert time.monotonic() - t0 < 2.0


def test_malformed_logprobs_name_the_fault(url: str) -> None:
    """NaN (which json parses) and logprob > 0 were returned as behaviour logprobs:
    a NaN importance weight poisons the whole update."""
    with pytest.raises(PolicyServerError, match="nan is not a finite log-probability"):
        _policy(url, "nanlp").generate([make_task(0)], 1, SP)
    with pytest.raises(PolicyServerError, match="3 tokens but 2 token_logprobs"):
        _policy(url, "lpcount", endpoint="completions").generate([make_task(0)], 1, SP)


def test_retry_after_is_honoured(url: str) -> None:
    _Handler.hits.pop("r429", None)
    with pytest.raises(PolicyServerError, match="429"):
        _policy(url, "r429").generate([make_task(0)], 1, SP)
    first, second = _Handler.hits["r429"]
    assert second - first >= 0.55


def test_redirect_is_refused_not_followed(url: str) -> None:
    pol = _policy(url, "redirect", api_key="sk-secret")
    with pytest.raises(ConfigError, match="302"):
        pol.generate([make_task(0)], 1, SP)


def test_no_tasks_no_requests(url: str) -> None:
    pol = _policy(url, "good")
    assert pol.generate([], 2, SP) == []
    assert pol.generate_from_tokens([], 2, SP) == []


def test_bad_retry_settings_refused() -> None:
    with pytest.raises(ValueError):
        OpenAIPolicy("http://127.0.0.1:1", "m", max_retries=-1)
    with pytest.raises(ValueError):
        OpenAIPolicy("http://127.0.0.1:1", "m", timeout_s=0)


def test_episode_turn_without_token_ids_keeps_flat_tokens_aligned(url: str,
                                                                  hf_policy: object) -> None:
    from polyrl.domains.base import Env

    class Echo(Env):
        def reset(self, *, seed: int | None = None) -> tuple[str, dict]:
            return "ready", {}

        def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
            return "ok", 0.0, False, False, {}

    pol = _policy(url, "good", tokenizer=hf_policy.tokenizer)  # type: ignore[attr-defined]
    ep: Episode = run_episode(pol, Echo(), make_task(0), max_turns=2)
    ids, lps, mask = ep.flat_tokens()
    assert len(ids) == len(lps) == len(mask)
