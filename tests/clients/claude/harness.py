"""Runs the real `claude` binary (CLAUDE_BIN) headless and offline against a fake model."""

import json
import os
import re
import subprocess
import sys


def check(condition, what):
    if not condition:
        print("FAIL:", what, file=sys.stderr)
        sys.exit(1)


def claude_env(home, url):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE"))}
    env.update({
        "HOME": home,
        "XDG_CONFIG_HOME": os.path.join(home, ".config"),
        "COMPACTD_CONFIG_DIR": os.path.join(home, ".config", "compactd"),
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": "dummy",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "ENABLE_TOOL_SEARCH": "false",
        # Claude Code keeps scratch files under $TMPDIR/claude-<uid>: in the test's home.
        "TMPDIR": os.path.join(home, "tmp"),
    })
    os.makedirs(env["TMPDIR"], exist_ok=True)
    return env


def run_claude(home, cwd, url, *args):
    """`claude -p …` with JSON output; its parsed result."""
    cmd = [os.environ["CLAUDE_BIN"], "-p", *args, "--output-format", "json"]
    done = subprocess.run(cmd, cwd=cwd, env=claude_env(home, url), capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    check(done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}: {done.stdout} {done.stderr}")
    return json.loads(done.stdout)


def transcript_path(home, cwd, session_id):
    """Where Claude Code keeps the session: its project folder is the cwd with every character
    other than a letter or digit made a `-`."""
    project = re.sub(r"[^A-Za-z0-9]", "-", os.path.realpath(cwd))
    return os.path.join(home, ".claude", "projects", project, session_id + ".jsonl")


def compactd(home, *args, check_rc=True):
    env = {k: v for k, v in os.environ.items()}
    env.update({"HOME": home, "XDG_CONFIG_HOME": os.path.join(home, ".config"),
                "COMPACTD_CONFIG_DIR": os.path.join(home, ".config", "compactd")})
    done = subprocess.run([os.environ["COMPACTD_BIN"], *args], env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    if check_rc:
        check(done.returncode == 0, f"compactd {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done


def user_texts(request):
    """Every text the request carries in user messages, in order."""
    out = []
    for message in request.get("messages", []):
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, str):
            out.append(content)
            continue
        for block in content:
            if block.get("type") == "text":
                out.append(block["text"])
            elif block.get("type") == "tool_result":
                inner = block.get("content")
                if isinstance(inner, str):
                    out.append(inner)
                else:
                    out.extend(b.get("text", "") for b in inner or [])
    return out
