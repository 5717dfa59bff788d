"""End-to-end test of the example agent: the real daemon, the fake LLM, a small context window.

Run from the repository root after ``cargo build``:

    python3 -m unittest discover -s examples/python-agent -v

``COMPACTD_BIN`` overrides the daemon binary (default ``target/debug/compactd``).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from agent import Agent  # noqa: E402
from compactd_client import Client  # noqa: E402
from fake_llm import FakeLLM  # noqa: E402

ROOT = HERE.parent.parent
BIN = os.environ.get("COMPACTD_BIN", str(ROOT / "target" / "debug" / "compactd"))
WINDOW = 8000
CONTINUE_PROMPT = "Continue if you have next steps."


def read_entries(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    return [e for e in lines if e.get("type") != "session"]


class AgentEndToEnd(unittest.TestCase):
    def setUp(self) -> None:
        self.assertTrue(os.access(BIN, os.X_OK), f"build the daemon first: {BIN} is missing")
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        home = Path(self.tmp.name)
        (home / "config").mkdir()
        (home / "project").mkdir()
        self.cwd = str(home / "project")
        self.env = {
            "COMPACTD_CONFIG_DIR": str(home / "config"),
            "COMPACTD_DATA_DIR": str(home / "data"),
        }
        self.log_lines: list[str] = []

    def run_agent(self, wait: bool, overflow_at: int) -> tuple[Agent, FakeLLM]:
        # Reads until 6 files are read and the prompt is over 6,200 tokens: the final answer's
        # usage is above the 6,000-token threshold, so the daemon compacts after it.
        fake = FakeLLM(
            tool_turns=6, context_window=WINDOW, overflow_at=overflow_at, finish_above=6200
        )
        base_url = fake.start()
        self.addCleanup(fake.stop)
        settings = {
            "providers": {
                "fake": {
                    "kind": "openai",
                    "baseUrl": base_url,
                    "models": {"fake-model": {"contextWindow": WINDOW}},
                }
            },
            "compaction": {"reserveTokens": 2000, "keepRecentTokens": 2000},
            "summarizer": {"kind": "extractive"},
        }
        stderr = open(Path(self.tmp.name) / "daemon.log", "wb")
        self.addCleanup(stderr.close)
        client = Client(BIN, env=self.env, stderr=stderr, client_name="python-agent-test", settings=settings)
        self.addCleanup(client.close)
        agent = Agent(
            client,
            base_url,
            "fake/fake-model",
            wait_for_compaction=wait,
            file_chars=4000,
            log=self.log_lines.append,
        )
        agent.start("Read every module of the project and report.", self.cwd)
        try:
            answer = agent.run()
        except Exception:
            print("\n".join(self.log_lines), file=sys.stderr)
            raise
        self.assertEqual(answer, "I have read every module; done.")
        if os.environ.get("AGENT_TEST_VERBOSE"):
            print("\n" + "\n".join(self.log_lines), file=sys.stderr)
        return agent, fake

    def check_run(self, agent: Agent, fake: FakeLLM, overflow_at: int) -> list[dict]:
        entries = read_entries(agent.session["path"])
        by_id = {e["id"]: e for e in entries}

        compactions = [e for e in entries if e["type"] == "compaction"]
        self.assertGreaterEqual(len(compactions), 2, "a threshold and an overflow compaction")

        # A threshold compaction is followed by the synthetic continue prompt.
        continues = [
            e
            for e in entries
            if e["type"] == "message"
            and e["message"].get("role") == "user"
            and e["message"].get("content") == CONTINUE_PROMPT
        ]
        self.assertTrue(continues, "no synthetic continue prompt in the file")
        for entry in continues:
            parent = by_id[entry["parentId"]]
            self.assertEqual(parent["type"], "compaction")
            self.assertTrue(entry["message"].get("synthetic"))

        # The overflowed reply is in the file, followed by an overflow compaction, and the
        # request after it succeeded.
        failed = [
            e
            for e in entries
            if e["type"] == "message" and e["message"].get("stopReason") == "error"
        ]
        self.assertEqual(len(failed), 1)
        # The recovery compaction is the next entry written; it hangs below the failed reply or
        # beside it (at its parent), so the failed reply is out of the context either way.
        # (a `compactd_leaf` marker may come first when the leaf moves back to the parent).
        later = entries[entries.index(failed[0]) + 1 :]
        recovery = next(e for e in later if e["type"] != "compactd_leaf")
        self.assertEqual(recovery["type"], "compaction")
        self.assertIn(recovery["parentId"], (failed[0]["id"], failed[0]["parentId"]))

        statuses = [(r["n"], r["status"]) for r in fake.requests]
        self.assertIn((overflow_at, 400), statuses)
        for record in fake.requests:
            if record["n"] != overflow_at:
                self.assertEqual(record["status"], 200, record)
            self.assertLessEqual(record["tokens"], WINDOW, record)
        self.assertGreater(max(r["tokens"] for r in fake.requests), 5000, "context never grew")

        # The agent asked compactd for the context before every model call.
        self.assertEqual(len(agent.contexts), len(fake.requests))
        return entries

    def test_agent_waiting_for_compaction(self) -> None:
        agent, fake = self.run_agent(wait=True, overflow_at=4)
        self.check_run(agent, fake, overflow_at=4)
        self.assertIn("autoContinue", agent.actions)
        self.assertIn("retry", agent.actions)

    def test_agent_driven_by_events(self) -> None:
        agent, fake = self.run_agent(wait=False, overflow_at=4)
        self.check_run(agent, fake, overflow_at=4)
        # docs/protocol.md, "As built": the daemon still finishes the auto-compaction inside the
        # append, so `compacting` / `recovering` may come as their final `autoContinue` /
        # `retry`; the agent handles both, and the events arrive either way.
        self.assertTrue({"compacting", "autoContinue"} & set(agent.actions), agent.actions)
        self.assertTrue({"recovering", "retry"} & set(agent.actions), agent.actions)
        self.assertIn("session/autoCompactionFinished", agent.events)
        self.assertIn("session/autoContinue", agent.events)


if __name__ == "__main__":
    unittest.main()
