"""A `$CODEX_HOME` for running the real `codex` offline against a fake model on 127.0.0.1."""

import os
import subprocess

CODEX = os.environ.get("CODEX_BIN", "codex")
KEY_VAR = "COMPACTD_TEST_FAKE_KEY"


def readme_block(lang, n=0):
    """The `n`th ```LANG block of the README's "Use with Codex" section."""
    readme = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "README.md")
    with open(readme) as f:
        section = f.read().split("\n## Use with Codex\n", 1)[1].split("\n## ", 1)[0]
    return section.split(f"```{lang}\n")[n + 1].split("```", 1)[0]


def write_config(home, port, extra="", top=""):
    """config.toml naming the fake provider; `top` goes first (top-level keys), `extra` last."""
    os.makedirs(home, exist_ok=True)
    with open(os.path.join(home, "config.toml"), "w") as f:
        f.write(f'''{top}
model = "fake-model"
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


def run(home, args, cwd, timeout=120, user_home=None):
    """Runs `codex ARGS` with `home` as CODEX_HOME (and `user_home` as HOME, so the MCP
    servers it starts see no real user's settings); returns the CompletedProcess."""
    env = dict(os.environ)
    env.update({"CODEX_HOME": home, KEY_VAR: "test-key", "NO_COLOR": "1",
                "RUST_LOG": "error"})
    if user_home is not None:
        env.update({"HOME": user_home, "XDG_CONFIG_HOME": os.path.join(user_home, ".config")})
    env.pop("OPENAI_API_KEY", None)
    return subprocess.run([CODEX, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def rollouts(home):
    """Every rollout file under `home`/sessions, oldest first."""
    found = []
    for root, _, files in os.walk(os.path.join(home, "sessions")):
        found += [os.path.join(root, f) for f in files if f.endswith(".jsonl")]
    return sorted(found)
