"""A `$CODEX_HOME` for running the real `codex` offline against a fake model on 127.0.0.1."""

import os
import subprocess

CODEX = os.environ.get("CODEX_BIN", "codex")
KEY_VAR = "COMPACTD_TEST_FAKE_KEY"


def write_config(home, port, extra=""):
    """config.toml naming the fake provider; `extra` is appended (e.g. `[mcp_servers.…]`)."""
    os.makedirs(home, exist_ok=True)
    with open(os.path.join(home, "config.toml"), "w") as f:
        f.write(f'''model = "fake-model"
model_provider = "fake"
check_for_update_on_startup = false
approval_policy = "never"
sandbox_mode = "read-only"

[analytics]
enabled = false

[otel]
exporter = "none"

[model_providers.fake]
name = "fake"
base_url = "http://127.0.0.1:{port}/v1"
wire_api = "responses"
env_key = "{KEY_VAR}"
request_max_retries = 0
stream_max_retries = 0

{extra}
''')


def run(home, args, cwd, timeout=120):
    """Runs `codex ARGS` with `home` as CODEX_HOME; returns the CompletedProcess."""
    env = dict(os.environ)
    env.update({"CODEX_HOME": home, KEY_VAR: "test-key", "NO_COLOR": "1",
                "RUST_LOG": "error"})
    env.pop("OPENAI_API_KEY", None)
    return subprocess.run([CODEX, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def rollouts(home):
    """Every rollout file under `home`/sessions, oldest first."""
    found = []
    for root, _, files in os.walk(os.path.join(home, "sessions")):
        found += [os.path.join(root, f) for f in files if f.endswith(".jsonl")]
    return sorted(found)
