"""`compactd compact` on a real Codex rollout, then `codex exec resume` (Codex CLI 0.169.0).

Codex runs three turns against a scripted fake Responses-API model on 127.0.0.1; the second
turn pastes a long log, and every response reports 70,000 input tokens. Then, as the README's "Use
with Codex" section says, `compactd compact ROLLOUT`:
- refuses while the rollout was just written (Codex may be mid-turn), writing nothing;
- once quiet, only appends lines (every byte before stays), Codex's own `compacted` record and
  a `token_count` event; `plan`, `context` and `search` read the rollout too.
The resumed turn, with auto-compaction at 50,000 tokens, must send compactd's summary and no
longer the first turn, in exactly one model request (without compactd's smaller usage, Codex
would compact first).
Run: COMPACTD_BIN=… CODEX_BIN=… python3 test_compact.py
"""

import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import codex_home  # noqa: E402
from fake_responses import FakeResponses, text_item  # noqa: E402

FIRST = "FIRST-TURN-7c1e: the build fails, find out why"
# About 25,000 tokens: more than compactd keeps verbatim by default (20,000), so the cut falls
# after the first turn.
SECOND = "here is the build log:\n" + "ld: warning: unused section .note in obj/part.o\n" * 2000
SUMMARY_PREFIX = "Another language model started to solve this problem"


def fail(what):
    print("FAIL:", what, file=sys.stderr)
    sys.exit(1)


def compactd(tmp, *args):
    env = dict(os.environ, HOME=tmp, COMPACTD_CONFIG_DIR=os.path.join(tmp, "compactd-config"),
               XDG_CONFIG_HOME=os.path.join(tmp, "xdg"))
    return subprocess.run([os.environ["COMPACTD_BIN"], *args], env=env, capture_output=True,
                          text=True, timeout=120)


def texts(request):
    return [json.dumps(item) for item in request["input"]]


def main():
    with tempfile.TemporaryDirectory(prefix="compactd-codex-") as tmp:
        home = os.path.join(tmp, "codex-home")
        answers = [lambda r: [text_item("The log only has warnings; the failure is elsewhere.")],
                   lambda r: [text_item("Checked the linker flags.", 2)],
                   lambda r: [text_item("Fixed: the missing -lm flag.", 3)]]
        with FakeResponses(answers, input_tokens=70_000) as fake:
            codex_home.write_config(home, fake.port)
            first = codex_home.run(home, ["exec", "--skip-git-repo-check", FIRST], cwd=tmp)
            if first.returncode != 0:
                fail(f"codex exec: {first.stderr}")
            [rollout] = codex_home.rollouts(home)
            thread = json.loads(open(rollout).readline())["payload"]["id"]
            for prompt in [SECOND, "and fix it"]:
                run = codex_home.run(home, ["exec", "resume", thread, "--skip-git-repo-check",
                                            prompt], cwd=tmp)
                if run.returncode != 0:
                    fail(f"codex exec resume: {run.stderr}")
            if fake.errors or len(fake.requests) != 3:
                fail(f"{len(fake.requests)} requests, {fake.errors}")

        before = open(rollout, "rb").read()
        busy = compactd(tmp, "compact", rollout)
        if busy.returncode == 0 or "in use" not in busy.stderr:
            fail(f"a just-written rollout was not refused: {busy.returncode} {busy.stderr}")
        if open(rollout, "rb").read() != before:
            fail("the refused compaction wrote to the rollout")
        quiet = os.stat(rollout).st_mtime - 60
        os.utime(rollout, (quiet, quiet))

        for command in (["plan", rollout], ["context", rollout], ["search", rollout, "FIRST-TURN-7c1e"]):
            run = compactd(tmp, *command)
            if run.returncode != 0:
                fail(f"compactd {command[0]} on a rollout: {run.stderr}")
        # The README's command.
        readme = codex_home.readme_block("sh").splitlines()[0].split()
        if readme[:2] != ["compactd", "compact"] or len(readme) != 3:
            fail(f"the README's compact command changed; update this test: {readme}")
        done = compactd(tmp, "compact", rollout)
        if done.returncode != 0 or "Codex compaction" not in done.stdout:
            fail(f"compactd compact: {done.returncode}\n{done.stdout}\n{done.stderr}")
        after = open(rollout, "rb").read()
        if not after.startswith(before):
            fail("the rollout's existing bytes changed")
        added = [json.loads(line) for line in after[len(before):].decode().splitlines()]
        kinds = [(a["type"], a["payload"].get("type")) for a in added]
        if kinds != [("compacted", None), ("event_msg", "token_count")]:
            fail(f"appended lines: {kinds}")
        summary = added[0]["payload"]["message"]

        with FakeResponses([lambda r: [text_item("Resumed after compactd.", 4)]] * 3,
                           input_tokens=5_000) as fake:
            codex_home.write_config(home, fake.port)
            with open(os.path.join(home, "config.toml")) as f:
                config = f.read()
            with open(os.path.join(home, "config.toml"), "w") as f:
                f.write(config.replace('model = "fake-model"\n',
                                       'model = "fake-model"\nmodel_auto_compact_token_limit = 50000\n', 1))
            run = codex_home.run(home, ["exec", "resume", thread, "--skip-git-repo-check",
                                        "what was the fix?"], cwd=tmp)
            if run.returncode != 0:
                fail(f"codex exec resume after compactd: {run.stderr}")
            if len(fake.requests) != 1:
                fail(f"{len(fake.requests)} model requests for the turn (Codex compacted again?): "
                     f"{done.stdout[:1500]}\n{len(summary)} {added[1]}\n{[texts(r['body'])[-1][:300] for r in fake.requests]}")
            sent = texts(fake.requests[0]["body"])
        if not any(SUMMARY_PREFIX in t and summary[-200:].replace("\n", "\\n")[:80] in t for t in sent):
            fail(f"compactd's summary was not sent: {sent}")
        if any("FIRST-TURN-7c1e" in t and SUMMARY_PREFIX not in t for t in sent):
            fail("the first turn was still sent")
        if not any("what was the fix?" in t for t in sent):
            fail("the new prompt was not sent")
    print("codex compact: compactd's compaction is honoured by codex exec resume, one request")


if __name__ == "__main__":
    main()
