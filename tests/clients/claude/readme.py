"""The README's "Use with Claude Code" section, read by the tests so that what it tells a user
is what they run: its install line, its MCP config line and its compact command."""

import os
import re

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..")


def section():
    text = open(os.path.join(ROOT, "README.md")).read()
    start = text.index("## Use with Claude Code")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def install_version():
    """The Claude Code version the README installs (`npm install -g …@X.Y.Z`)."""
    match = re.search(r"npm install -g @anthropic-ai/claude-code@(\d+\.\d+\.\d+)", section())
    assert match, "the README's Claude Code section has no pinned npm install line"
    return match.group(1)


def mcp_config():
    """The one line of MCP config the README tells users to save as compactd-mcp.json."""
    for line in section().splitlines():
        if line.startswith('{"mcpServers"'):
            return line
    raise AssertionError("the README's Claude Code section has no mcpServers line")


def compact_command():
    """The README's `compactd compact` line for a transcript, as argv with the placeholder."""
    for line in section().splitlines():
        if line.startswith("compactd compact "):
            return line.split()
    raise AssertionError("the README's Claude Code section has no compactd compact line")
