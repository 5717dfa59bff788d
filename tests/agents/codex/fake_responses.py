"""A scripted fake of the OpenAI Responses API on 127.0.0.1, for driving the real `codex` binary.

Each POST /v1/responses is recorded (its JSON body) and answered, as a server-sent event stream,
by the next step of the script: a function `step(request) -> list of output items`. Usage is
reported in `response.completed` so Codex records token usage as it does with a real model.
"""

import http.server
import json
import threading


def text_item(text, n=1):
    return {"type": "message", "role": "assistant", "id": f"msg_{n}",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def call_item(name, arguments, call_id="call_1", namespace=None):
    item = {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id,
            "name": name, "arguments": json.dumps(arguments)}
    if namespace is not None:
        item["namespace"] = namespace
    return item


class FakeResponses:
    """Serves `script` (a list of callables, one per model request) until stopped."""

    def __init__(self, script, input_tokens=1000):
        self.script = list(script)
        self.requests = []
        self.input_tokens = input_tokens
        self.errors = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                body = json.dumps({"data": [], "models": []}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                length = int(self.headers.get("content-length", "0"))
                raw = self.rfile.read(length)
                if self.headers.get("content-encoding") == "zstd":
                    outer.errors.append("zstd-compressed request body")
                try:
                    request = json.loads(raw)
                except ValueError as e:
                    outer.errors.append(f"{self.path}: not JSON: {e}")
                    self.send_response(400)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                outer.requests.append({"path": self.path, "body": request})
                if not self.path.endswith("/responses"):
                    outer.errors.append(f"unexpected POST {self.path}")
                    self.send_response(404)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                if not outer.script:
                    outer.errors.append("more model requests than the script has steps")
                    items = [text_item("(script exhausted)")]
                else:
                    items = outer.script.pop(0)(request)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                n = len(outer.requests)
                rid = f"resp_{n}"
                events = [("response.created", {"type": "response.created",
                                                "response": {"id": rid}})]
                for i, item in enumerate(items):
                    events.append(("response.output_item.added", {
                        "type": "response.output_item.added", "output_index": i, "item": item}))
                    if item["type"] == "message":
                        events.append(("response.output_text.delta", {
                            "type": "response.output_text.delta", "output_index": i,
                            "item_id": item["id"], "content_index": 0,
                            "delta": item["content"][0]["text"]}))
                    events.append(("response.output_item.done", {
                        "type": "response.output_item.done", "output_index": i, "item": item}))
                events.append(("response.completed", {
                    "type": "response.completed",
                    "response": {"id": rid, "usage": {
                        "input_tokens": outer.input_tokens,
                        "input_tokens_details": {"cached_tokens": 0},
                        "output_tokens": 20,
                        "output_tokens_details": {"reasoning_tokens": 0},
                        "total_tokens": outer.input_tokens + 20}}}))
                for name, data in events:
                    self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
