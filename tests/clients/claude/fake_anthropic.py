"""A scripted fake of the Anthropic Messages API on 127.0.0.1, for the real `claude` binary.

Each `POST /v1/messages` is recorded (its JSON body) and answered, as server-sent events, with
the next reply of the script: a text, or a tool call. Claude Code's side requests (titles,
quota checks: any request without `tools`) get a short text and do not use up the script.
`count_tokens` is answered with a fixed count. Nothing leaves the machine.
"""

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Reply:
    def __init__(self, text=None, tool=None, tool_input=None):
        self.text, self.tool, self.tool_input = text, tool, tool_input


class FakeAnthropic:
    def __init__(self, script):
        self.script = list(script)
        self.requests = []  # bodies of the requests that used the script
        self.side_requests = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self.send_response(200)
                self.end_headers()

            def do_GET(self):
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def do_POST(self):
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                if "count_tokens" in self.path:
                    return self.json({"input_tokens": 100})
                if not self.path.startswith("/v1/messages"):
                    return self.json({})
                reply = fake.next_reply(body)
                self.stream(body, reply)

            def json(self, value):
                data = json.dumps(value).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def stream(self, body, reply):
                events = sse_events(body.get("model", "claude-sonnet-4-5"), reply)
                if not body.get("stream"):
                    return self.json(events[0][1]["message"] | {"content": [b[1]["content_block"] for b in events if b[0] == "content_block_start"]})
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.end_headers()
                for name, data in events:
                    self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def next_reply(self, body):
        with self.lock:
            if not body.get("tools"):
                self.side_requests.append(body)
                return Reply(text="Side answer.")
            self.requests.append(body)
            if not self.script:
                return Reply(text="(the script is over)")
            return self.script.pop(0)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


MESSAGE_IDS = itertools.count(1)


def sse_events(model, reply):
    """The events of one reply; each has its own message id, as the real API's (Claude Code
    joins the transcript's assistant lines that share one)."""
    usage = {"input_tokens": 100, "output_tokens": 10, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0}
    start = {"type": "message_start", "message": {
        "id": "msg_fake_%d" % next(MESSAGE_IDS), "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": usage}}
    events = [("message_start", start)]
    if reply.tool:
        block = {"type": "tool_use", "id": "toolu_fake_%d" % id(reply), "name": reply.tool, "input": {}}
        events += [
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(reply.tool_input)}}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ]
        stop = "tool_use"
    else:
        events += [
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": reply.text}}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ]
        stop = "end_turn"
    events += [
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                           "usage": {"output_tokens": 10}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return events
