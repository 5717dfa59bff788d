"""A fake OpenAI-compatible chat-completions server for running the example agent offline.

``POST /v1/chat/completions`` (non-streaming). The model asks for the ``read`` tool on a new
file until it has read ``tool_turns`` files and its prompt is at least ``finish_above`` tokens;
then (and from then on) it answers with plain text, so a run ends with a large context and the
daemon's end-of-turn threshold check has something to do. Usage numbers are the
request's size (characters / 4, the estimate compactd's ``chars4`` tokenizer uses), so they grow
as the agent's context grows. A request larger than ``context_window`` gets the 400 error an
OpenAI-compatible server sends for a context overflow, and ``overflow_at`` (1-based request
number) makes exactly one request fail that way on purpose.

Every request is recorded in ``requests`` (``tokens``, ``messages``, ``status``) for tests.

Run it alone with ``python3 fake_llm.py --port 8123``.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

MODEL = "fake-model"


def estimate_tokens(messages: list[dict[str, Any]]) -> int:
    """Characters of text, tool names and arguments, divided by 4 and rounded up."""
    chars = 0
    for msg in messages:
        content = msg.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(len(part.get("text", "")) for part in content if isinstance(part, dict))
        for call in msg.get("tool_calls") or []:
            fn = call.get("function", {})
            chars += len(fn.get("name", "")) + len(fn.get("arguments", ""))
    return -(-chars // 4)


class FakeLLM:
    """The server; ``start()`` returns the base URL (``http://127.0.0.1:PORT/v1``)."""

    def __init__(
        self,
        tool_turns: int = 10,
        context_window: int = 8000,
        overflow_at: Optional[int] = None,
        port: int = 0,
        finish_above: int = 0,
    ):
        self.tool_turns = tool_turns
        self.finish_above = finish_above
        self._done = False
        self.context_window = context_window
        self.overflow_at = overflow_at
        self.requests: list[dict[str, Any]] = []
        self._answers = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._thread: Optional[threading.Thread] = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> str:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self.base_url

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def complete(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The answer to one chat-completions request: (HTTP status, JSON body)."""
        messages = body.get("messages") or []
        tokens = estimate_tokens(messages)
        with self._lock:
            number = len(self.requests) + 1
            record = {"n": number, "tokens": tokens, "messages": len(messages), "status": 200}
            self.requests.append(record)
            simulated = self.overflow_at == number
            if simulated or tokens > self.context_window:
                record["status"] = 400
                record["simulatedOverflow"] = simulated
                # The wording vLLM / OpenRouter use; compactd recognises it as an overflow.
                text = (
                    f"This model's maximum context length is {self.context_window} tokens. "
                    f"However, you requested {max(tokens, self.context_window + 1)} tokens. "
                    "Please reduce the length of the messages."
                )
                return 400, {
                    "error": {
                        "message": text,
                        "type": "invalid_request_error",
                        "code": "context_length_exceeded",
                    }
                }
            self._answers += 1
            answer = self._answers
            if answer > self.tool_turns and tokens >= self.finish_above:
                self._done = True
            done = self._done
        if not done:
            message = {
                "role": "assistant",
                "content": f"Reading file {answer}.",
                "tool_calls": [
                    {
                        "id": f"call_{answer}",
                        "type": "function",
                        "function": {
                            "name": "read",
                            "arguments": json.dumps({"path": f"src/module_{answer}.py"}),
                        },
                    }
                ],
            }
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": "I have read every module; done."}
            finish = "stop"
        completion = 12
        return 200, {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "model": body.get("model", MODEL),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": tokens,
                "completion_tokens": completion,
                "total_tokens": tokens + completion,
            },
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._reply(404, {"error": {"message": f"no route {self.path}"}})
                    return
                length = int(self.headers.get("Content-Length", "0"))
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError as err:
                    self._reply(400, {"error": {"message": f"bad JSON: {err}"}})
                    return
                self._reply(*fake.complete(body))

            def _reply(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8123)
    parser.add_argument("--tool-turns", type=int, default=10)
    parser.add_argument("--context-window", type=int, default=8000)
    parser.add_argument("--overflow-at", type=int, default=None)
    parser.add_argument("--finish-above", type=int, default=0)
    args = parser.parse_args()
    fake = FakeLLM(
        args.tool_turns, args.context_window, args.overflow_at, args.port, args.finish_above
    )
    print(f"fake LLM on {fake.base_url}", flush=True)
    fake._server.serve_forever()


if __name__ == "__main__":
    main()
