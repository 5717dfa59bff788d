#!/usr/bin/env python3
"""A small coding agent that keeps its conversation in compactd, through the typed Python client
package (``pip install ./clients/python``; otherwise the standard library only).

The loop is the one docs/protocol.md §8 describes:

1. ``session/create``, append a ``model_change`` (it selects the context window) and the
   user's task;
2. ``session/context`` before every model call, and send exactly those messages;
3. run the tools the model asked for, then append the assistant message (with ``usage``,
   ``stopReason``, ``provider``, ``model``) and the tool results in one ``session/append``.
   The daemon's auto-compaction check looks at the last entry appended: after a tool-use turn
   it is a tool result, so the threshold check runs when the model stops calling tools (as in
   the reference agent), never between a tool call and its result; an overflowed request is
   recovered at once;
4. do what the append result's ``action`` says: ``continue``, ``autoContinue`` / ``retry``
   (with ``waitForCompaction``), or ``compacting`` / ``recovering`` (without it: wait for
   ``session/autoCompactionFinished`` and ``session/autoContinue``), ``failed``.

The model is any OpenAI-compatible chat-completions endpoint (``--base-url``); the tools are
fake (``read`` returns a large made-up file, so the context grows quickly). Try it offline with
``fake_llm.py``:

    pip install ./clients/python   # from the repository root
    python3 fake_llm.py --port 8123 &
    python3 agent.py --base-url http://127.0.0.1:8123/v1 --context-window 8000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Optional

from compactd_client import Client

SUMMARY_EVENTS = (
    "session/autoCompactionStarted",
    "session/autoCompactionFinished",
    "session/compactionFinished",
    "session/autoContinue",
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read",
            "description": "Read a file of the project.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]


def now_ms() -> int:
    return int(time.time() * 1000)


def fake_file(path: str, chars: int) -> str:
    """Made-up file contents of about ``chars`` characters, different for each path."""
    lines = [f"# {path}"]
    i = 0
    while sum(len(line) + 1 for line in lines) < chars:
        i += 1
        lines.append(f"def helper_{i}(value):  # {path} line {i}\n    return value * {i}")
    return "\n".join(lines)[:chars]


def text_of(content: Any) -> str:
    """The text of a compactd message's content (a string or a list of blocks)."""
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if b.get("type") == "text")


def to_openai(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """compactd's LLM-ready messages (user, assistant, toolResult) in the OpenAI chat shape."""
    out: list[dict[str, Any]] = []
    for msg in messages:
        role = msg.get("role")
        if role == "user":
            out.append({"role": "user", "content": text_of(msg.get("content"))})
        elif role == "assistant":
            blocks = msg.get("content") or []
            calls = [
                {
                    "id": b["id"],
                    "type": "function",
                    "function": {"name": b["name"], "arguments": json.dumps(b.get("arguments"))},
                }
                for b in blocks
                if b.get("type") == "toolCall"
            ]
            item: dict[str, Any] = {"role": "assistant", "content": text_of(blocks) or None}
            if calls:
                item["tool_calls"] = calls
            out.append(item)
        elif role == "toolResult":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": msg.get("toolCallId"),
                    "content": text_of(msg.get("content")),
                }
            )
    return out


class Agent:
    """One agent run on one compactd session."""

    def __init__(
        self,
        client: Client,
        base_url: str,
        model: str,
        wait_for_compaction: bool = True,
        file_chars: int = 4000,
        max_model_calls: int = 40,
        log: Callable[[str], None] = print,
        api_key: Optional[str] = None,
    ):
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.provider, _, self.model = model.partition("/")
        self.wait = wait_for_compaction
        self.file_chars = file_chars
        self.max_model_calls = max_model_calls
        self.log = log
        self.api_key = api_key
        self.session: dict[str, Any] = {}
        self.auto_continue = True
        # What the run did, for tests and for the final report.
        self.contexts: list[int] = []
        self.actions: list[str] = []
        self.events: list[str] = []

    # -- compactd ----------------------------------------------------------------------------

    def start(self, task: str, cwd: str) -> dict[str, Any]:
        settings = self.client.settings_get({})["settings"]
        self.auto_continue = settings.get("compaction", {}).get("autoContinue", True)
        self.session = dict(self.client.session_create({"cwd": cwd, "title": task[:60]}))
        self.log(f"[agent ] session {self.session['sessionId']} at {self.session['path']}")
        self.append(
            [
                {"type": "modelChange", "model": f"{self.provider}/{self.model}"},
                {
                    "type": "message",
                    "message": {"role": "user", "content": task, "timestamp": now_ms()},
                },
            ]
        )
        return self.session

    def append(self, entries: list[dict[str, Any]]) -> dict[str, Any]:
        params = {
            "sessionId": self.session["sessionId"],
            "entries": entries,
            "waitForCompaction": self.wait,
        }
        result = self.client.session_append(params, timeout=300)
        self.actions.append(result["action"])
        self.log(
            f"[daemon] append {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}: "
            f"action={result['action']} contextTokens={result.get('contextTokens')} "
            f"threshold={result.get('thresholdTokens')}"
        )
        return result

    def wait_event(self, method: str) -> dict[str, Any]:
        sid = self.session["sessionId"]
        params = self.client.wait_notification(method, lambda p: p.get("sessionId") == sid, 300)
        self.note_event(method, params)
        return params

    def note_event(self, method: str, params: dict[str, Any]) -> None:
        self.events.append(method)
        if method == "session/autoCompactionStarted":
            detail = f"reason={params.get('reason')}"
        elif method == "session/autoCompactionFinished":
            result = params.get("result") or {}
            detail = (
                f"reason={params.get('reason')} tokensBefore={result.get('tokensBefore')} "
                f"tokensAfter={result.get('tokensAfter')} willRetry={params.get('willRetry')} "
                f"aborted={params.get('aborted')} error={params.get('errorMessage')}"
            )
        elif method == "session/autoContinue":
            detail = repr(params.get("prompt"))
        else:
            return
        self.log(f"[event ] {method} {detail}")

    def log_events(self) -> None:
        for msg in self.client.drain():
            self.note_event(msg["method"], msg.get("params") or {})

    # -- the model and the tools ----------------------------------------------------------------

    def call_model(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """One chat completion; HTTP errors come back as ``{"error": text}``."""
        body = json.dumps(
            {"model": self.model, "messages": to_openai(messages), "tools": TOOLS}
        ).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(
            f"{self.base_url}/chat/completions", data=body, headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as err:
            raw = err.read().decode("utf-8", "replace")
            try:
                text = json.loads(raw)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                text = raw or str(err)
            return {"error": f"{err.code} {text}"}

    def run_tool(self, call: dict[str, Any]) -> dict[str, Any]:
        args = call.get("arguments") or {}
        if call["name"] == "read":
            text, is_error = fake_file(str(args.get("path")), self.file_chars), False
        else:
            text, is_error = f"unknown tool {call['name']}", True
        self.log(f"[tool  ] {call['name']}({json.dumps(args)}) -> {len(text)} characters")
        return {
            "role": "toolResult",
            "toolCallId": call["id"],
            "toolName": call["name"],
            "content": [{"type": "text", "text": text}],
            "isError": is_error,
            "timestamp": now_ms(),
        }

    def assistant_message(self, reply: dict[str, Any]) -> dict[str, Any]:
        base = {"provider": self.provider, "model": self.model, "timestamp": now_ms()}
        if "error" in reply:
            zero = {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0}
            return {
                "role": "assistant",
                "content": [],
                "usage": zero,
                "stopReason": "error",
                "errorMessage": reply["error"],
                **base,
            }
        choice = reply["choices"][0]
        message = choice["message"]
        content: list[dict[str, Any]] = []
        if message.get("content"):
            content.append({"type": "text", "text": message["content"]})
        for call in message.get("tool_calls") or []:
            content.append(
                {
                    "type": "toolCall",
                    "id": call["id"],
                    "name": call["function"]["name"],
                    "arguments": json.loads(call["function"]["arguments"] or "{}"),
                }
            )
        usage = reply.get("usage") or {}
        prompt, completion = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
        return {
            "role": "assistant",
            "content": content,
            "usage": {
                "input": prompt,
                "output": completion,
                "cacheRead": 0,
                "cacheWrite": 0,
                "totalTokens": prompt + completion,
            },
            "stopReason": "toolUse" if choice.get("finish_reason") == "tool_calls" else "stop",
            **base,
        }

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> str:
        """Runs until the model stops asking for tools; returns its last text."""
        sid = self.session["sessionId"]
        last_text = ""
        for _ in range(self.max_model_calls):
            context = self.client.session_context({"sessionId": sid})
            self.contexts.append(context["tokens"])
            self.log(
                f"[model ] call {len(self.contexts)}: {len(context['messages'])} messages, "
                f"{context['tokens']} tokens (window {context['contextWindow']}, "
                f"threshold {context['thresholdTokens']})"
            )
            reply = self.call_model(context["messages"])
            assistant = self.assistant_message(reply)
            if "error" in reply:
                self.log(f"[model ] error: {reply['error']}")
            else:
                last_text = text_of(assistant["content"])
                self.log(f"[model ] {last_text!r}")
            calls = [b for b in assistant["content"] if b.get("type") == "toolCall"]
            entries = [{"type": "message", "message": assistant}]
            entries += [{"type": "message", "message": self.run_tool(c)} for c in calls]
            result = self.append(entries)
            step = self.next_step(result, failed_reply="error" in reply, wants_tools=bool(calls))
            self.log_events()
            if step == "done":
                return last_text
        raise RuntimeError(f"gave up after {self.max_model_calls} model calls")

    def next_step(self, result: dict[str, Any], failed_reply: bool, wants_tools: bool) -> str:
        """``model`` (call the model again) or ``done``, from the append result."""
        action = result["action"]
        if action in ("autoContinue", "retry"):
            return "model"
        if action == "compacting":
            finished = self.wait_event("session/autoCompactionFinished")
            if finished.get("result") and not finished.get("aborted") and self.auto_continue:
                self.wait_event("session/autoContinue")
                return "model"
        elif action == "recovering":
            finished = self.wait_event("session/autoCompactionFinished")
            if finished.get("willRetry"):
                return "model"
            raise RuntimeError(finished.get("errorMessage") or "context overflow")
        elif action == "failed":
            outcome = result.get("autoCompaction") or {}
            if failed_reply:
                raise RuntimeError(outcome.get("errorMessage") or "context overflow")
            self.log(f"[agent ] auto-compaction did not run: {outcome}")
        if failed_reply:
            raise RuntimeError("the model call failed and compactd did not recover it")
        return "model" if wants_tools else "done"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="A compactd example agent.")
    parser.add_argument("--base-url", required=True, help="OpenAI-compatible API base URL")
    parser.add_argument("--model", default="fake/fake-model", help="provider/model id")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY")
    parser.add_argument("--compactd", default="compactd", help="the compactd binary")
    parser.add_argument("--cwd", default=os.getcwd())
    parser.add_argument("--task", default="Read every module of the project and report.")
    parser.add_argument("--context-window", type=int, help="the model's context window")
    parser.add_argument("--settings", help="a JSON file of compactd settings for this run")
    parser.add_argument("--file-chars", type=int, default=4000)
    parser.add_argument(
        "--no-wait", action="store_true", help="handle compaction by events, not waitForCompaction"
    )
    args = parser.parse_args(argv)

    settings: dict[str, Any] = {}
    if args.settings:
        with open(args.settings, encoding="utf-8") as f:
            settings = json.load(f)
    if args.context_window:
        provider, _, model = args.model.partition("/")
        settings.setdefault("providers", {}).setdefault(provider, {"kind": "openai"})
        settings["providers"][provider].setdefault("models", {})[model] = {
            "contextWindow": args.context_window
        }

    with Client(args.compactd, client_name="python-agent", settings=settings or None) as client:
        agent = Agent(
            client,
            args.base_url,
            args.model,
            wait_for_compaction=not args.no_wait,
            file_chars=args.file_chars,
            api_key=os.environ.get(args.api_key_env),
        )
        agent.start(args.task, args.cwd)
        answer = agent.run()
        print(f"[agent ] done after {len(agent.contexts)} model calls: {answer}")
        print(f"[agent ] session file: {agent.session['path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
