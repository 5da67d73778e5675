"""A real OpenAI-compatible HTTP server on 127.0.0.1 serving a tiny hf model (tests only).

Serves ``POST /v1/completions`` (text or token-id prompts), ``POST
/v1/chat/completions`` and ``GET /v1/models`` from an ``HFPolicy`` with the
stdlib ``ThreadingHTTPServer``. Test hooks: ``fail_next`` (answer the next N
requests with HTTP ``fail_status``), ``delay_s`` (sleep before answering),
and ``max_in_flight`` (the most requests seen at once).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from polyrl.rollout import HFPolicy, SamplingParams
from polyrl.rollout.base import render_messages


class TinyOpenAIServer:
    """Start with ``start()``; ``url`` is ``http://127.0.0.1:PORT``; ``stop()`` shuts down."""

    def __init__(self, policy: HFPolicy, model_name: str = "tiny") -> None:
        self.policy = policy
        self.model_name = model_name
        self.fail_next = 0
        self.fail_status = 503
        self.delay_s = 0.0
        self.in_flight = 0
        self.max_in_flight = 0
        self.requests = 0
        self.any_model = False  # llama.cpp-like: accept any name, answer as model_name
        self._lock = threading.Lock()
        self._stopped = False
        self._gen_lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> TinyOpenAIServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; waits (up to 5 s) for requests still being answered."""
        if self._stopped:
            return
        self._stopped = True
        self.httpd.shutdown()
        self.httpd.server_close()
        deadline = time.monotonic() + 5.0
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Compute the JSON answer for one request."""
        if body.get("model") != self.model_name and not self.any_model:
            return 404, {"error": {"message": f"model {body.get('model')!r} not found"}}
        tok = self.policy.tokenizer
        if path == "/v1/chat/completions":
            ids = render_messages(tok, body["messages"])
        elif isinstance(body.get("prompt"), list):
            ids = [int(i) for i in body["prompt"]]
        else:
            ids = list(tok(body["prompt"], add_special_tokens=False)["input_ids"])
        if len(ids) >= self.policy.context_tokens:
            return 400, {"error": {"message": "This model's maximum context length is exceeded"}}
        sp = SamplingParams(
            temperature=float(body.get("temperature", 1.0)), top_p=float(body.get("top_p", 1.0)),
            max_tokens=int(body.get("max_tokens", 16)), stop=tuple(body.get("stop") or ()),
            seed=body.get("seed"),
        )
        with self._gen_lock:
            c = self.policy.generate_from_tokens([ids], 1, sp)[0]
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        tokens = [f"token_id:{t}" if as_ids else tok.decode([t]) for t in c.token_ids]
        if path == "/v1/chat/completions":
            lp = {"content": [{"token": t, "logprob": v} for t, v in zip(tokens, c.logprobs,
                                                                          strict=True)]}
            choice = {"index": 0, "message": {"role": "assistant", "content": c.text}}
        else:
            lp = {"tokens": tokens, "token_logprobs": c.logprobs}
            choice = {"index": 0, "text": c.text}
        choice["finish_reason"] = c.finish_reason
        choice["logprobs"] = lp if body.get("logprobs") else None
        return 200, {"id": f"cmpl-{self.requests}", "object": "completion",
                     "model": self.model_name, "choices": [choice]}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, obj: dict[str, Any]) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                if self.path == "/v1/models":
                    self._send(200, {"data": [{"id": server.model_name, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:  # noqa: N802
                with server._lock:
                    server.requests += 1
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    fail = server.fail_next > 0
                    server.fail_next -= 1 if fail else 0
                try:
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                    if server.delay_s:
                        time.sleep(server.delay_s)
                    if fail:
                        reply = (server.fail_status, {"error": {"message": "injected"}})
                    elif self.path in ("/v1/completions", "/v1/chat/completions"):
                        reply = server.answer(self.path, body)
                    else:
                        reply = (404, {"error": {"message": "not found"}})
                finally:  # counted until answered (before the bytes go out)
                    with server._lock:
                        server.in_flight -= 1
                self._send(*reply)

        return Handler
