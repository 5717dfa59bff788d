#!/usr/bin/env python3
"""Generates ``compactd_client/protocol.py`` from the daemon's JSON Schema.

The input is ``schema/protocol.schema.json`` at the repository root (written by
``compactd schema --out schema``). Every definition becomes a ``TypedDict`` (objects), a
``Literal`` (string enums) or an alias (unions, maps); the method list becomes typed request
methods for the sync and asyncio clients and tables of the notifications; the error list
becomes ``ERROR_CODES``. Standard library only.

usage: generate.py [--check] [--schema FILE] [--out FILE]
``--check`` writes nothing and exits 1 when the file is stale (the tests run it).
"""

from __future__ import annotations

import argparse
import json
import keyword
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
DEFAULT_SCHEMA = HERE.parent.parent / "schema" / "protocol.schema.json"
DEFAULT_OUT = HERE / "compactd_client" / "protocol.py"

SCALARS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}


class Generator:
    def __init__(self, schema: dict):
        self.schema = schema
        self.defs: dict = schema["$defs"]
        # Emitted in order: TypedDict classes (annotations are lazy) and aliases (evaluated at
        # import, so they quote the names they use).
        self.classes: list[str] = []
        self.aliases: list[str] = []
        self.names: set[str] = set()

    # -- types ---------------------------------------------------------------------------------

    def type_of(self, node, hint: str) -> str:
        """The annotation for ``node``; ``hint`` names inline objects that need a class."""
        if node is True or node == {} or not isinstance(node, dict):
            return "Any"
        if "$ref" in node:
            return node["$ref"].rsplit("/", 1)[-1]
        if "allOf" in node and len(node["allOf"]) == 1:
            return self.type_of(node["allOf"][0], hint)
        if "const" in node:
            return f"Literal[{json.dumps(node['const'])}]"
        if "enum" in node:
            return f"Literal[{', '.join(json.dumps(v) for v in node['enum'])}]"
        for key in ("oneOf", "anyOf"):
            if key in node:
                return self.union(node[key], hint)
        types = node.get("type")
        if isinstance(types, list):
            parts = [self.type_of({**node, "type": t}, hint) for t in types]
            return self.join(parts)
        if types in SCALARS and types not in ("object", "array"):
            return SCALARS[types]
        if types == "array":
            return f"list[{self.type_of(node.get('items', True), hint + 'Item')}]"
        if types == "object" or "properties" in node:
            if node.get("properties"):
                return self.typed_dict(hint, node)
            extra = node.get("additionalProperties", True)
            return f"dict[str, {self.type_of(extra, hint + 'Value')}]"
        return "Any"

    @staticmethod
    def join(parts: list[str]) -> str:
        unique = list(dict.fromkeys(parts))
        if len(unique) == 1:
            return unique[0]
        if "None" in unique:
            rest = [p for p in unique if p != "None"]
            return f"Optional[{Generator.join(rest)}]"
        return f"Union[{', '.join(unique)}]"

    def union(self, variants: list, hint: str) -> str:
        if all(isinstance(v, dict) and "const" in v for v in variants):
            return f"Literal[{', '.join(json.dumps(v['const']) for v in variants)}]"
        parts = []
        for i, variant in enumerate(variants):
            name = f"{hint}{self.variant_name(variant, i)}"
            parts.append(self.type_of(variant, name))
        return self.join(parts)

    @staticmethod
    def variant_name(variant, index: int) -> str:
        """A tagged variant is named by its tag (``type``/``kind`` const), else by position."""
        props = variant.get("properties", {}) if isinstance(variant, dict) else {}
        for tag in ("type", "kind"):
            const = props.get(tag, {}).get("const") if isinstance(props.get(tag), dict) else None
            if isinstance(const, str):
                return "".join(p[:1].upper() + p[1:] for p in re.split(r"[^A-Za-z0-9]+", const) if p)
        return f"Variant{index + 1}"

    def typed_dict(self, name: str, node: dict) -> str:
        if name in self.names:
            base, n = name, 2
            while f"{base}{n}" in self.names:
                n += 1
            name = f"{base}{n}"
        self.names.add(name)
        required = set(node.get("required", []))
        fields = []
        for key, prop in node["properties"].items():
            annotation = self.type_of(prop, name + key[:1].upper() + key[1:])
            if key not in required:
                annotation = f"NotRequired[{annotation}]"
            fields.append((key, annotation, describe(prop)))
        doc = describe(node)
        if all(key.isidentifier() and not keyword.iskeyword(key) for key, _, _ in fields):
            lines = [f"class {name}(TypedDict):"]
            if doc:
                lines.append(f"    {docstring(doc, '    ')}")
            for key, annotation, field_doc in fields:
                lines.append(f"    {key}: {annotation}")
                if field_doc:
                    lines.append(f"    {docstring(field_doc, '    ')}")
            if not fields and not doc:
                lines.append("    pass")
        else:
            body = ", ".join(f"{json.dumps(k)}: {quote_names(a)}" for k, a, _ in fields)
            lines = [f"{name} = TypedDict({json.dumps(name)}, {{{body}}})"]
            if doc:
                lines.insert(0, comment(doc))
        self.classes.append("\n".join(lines))
        return name

    def definition(self, name: str, node: dict) -> None:
        if node.get("type") == "object" and node.get("properties"):
            self.typed_dict(name, node)
            return
        annotation = self.type_of(node, name)
        if annotation == name:
            return
        doc = describe(node)
        self.aliases.append((comment(doc) + "\n" if doc else "") + f"{name} = {quote_names(annotation)}")

    # -- methods -------------------------------------------------------------------------------

    def methods(self) -> str:
        out = []
        requests = [m for m in self.schema["methods"] if m["direction"] == "clientToServer" and m["kind"] == "request"]
        wrapped = [m for m in requests if m["method"] not in ("initialize", "shutdown")]
        for flavour, prefix, awaiting in (("Sync", "", ""), ("Async", "async ", "await ")):
            out.append(f"class {flavour}Methods:")
            out.append(f'    """Typed ``request`` calls, one per client request of the protocol ({flavour.lower()})."""')
            out.append("")
            returns = "Awaitable[Any]" if awaiting else "Any"
            out.append(f"    request: Callable[..., {returns}]")
            for m in wrapped:
                params = self.type_of(m["params"], "Params")
                result = self.type_of(m["result"], "Result")
                name = python_name(m["method"])
                out.append("")
                out.append(f"    {prefix}def {name}(self, params: {params}, **options: Any) -> {result}:")
                out.append(f"        {docstring(m['description'] + ' (``' + m['method'] + '``)', '        ')}")
                out.append(f"        return {awaiting}self.request({json.dumps(m['method'])}, params, **options)  # type: ignore[no-any-return]")
            out.append("")
            out.append("")
        return "\n".join(out)

    def tables(self) -> str:
        def table(direction: str, kind: str) -> str:
            rows = []
            for m in self.schema["methods"]:
                if m["direction"] == direction and m["kind"] == kind:
                    params = self.type_of(m["params"], "Params")
                    result = self.type_of(m["result"], "Result") if m.get("result") else "None"
                    rows.append(f'    {json.dumps(m["method"])}: ({json.dumps(params)}, {json.dumps(result)}),')
            return "\n".join(rows)

        errors = "\n".join(f'    {json.dumps(e["kind"])}: {e["code"]},' for e in self.schema["errors"])
        return (
            "#: Client requests: method -> (params type, result type), by name.\n"
            f"CLIENT_REQUESTS: dict[str, tuple[str, str]] = {{\n{table('clientToServer', 'request')}\n}}\n\n"
            "#: Notifications the daemon sends: method -> (params type, None).\n"
            f"SERVER_NOTIFICATIONS: dict[str, tuple[str, str]] = {{\n{table('serverToClient', 'notification')}\n}}\n\n"
            "#: Requests the daemon sends to a client that declared them: method -> (params, answer).\n"
            f"SERVER_REQUESTS: dict[str, tuple[str, str]] = {{\n{table('serverToClient', 'request')}\n}}\n\n"
            "#: The ``code`` of each typed error, by its ``data.kind``.\n"
            f"ERROR_CODES: dict[str, int] = {{\n{errors}\n}}\n"
        )

    def render(self) -> str:
        for name, node in self.defs.items():
            self.definition(name, node)
        head = (
            "# GENERATED by scripts/generate.py from schema/protocol.schema.json: do not edit.\n"
            "# `python3 scripts/generate.py` writes it; `--check` (run by the tests) fails when it is stale.\n"
            '"""The compactd protocol\'s types, generated from its JSON Schema."""\n\n'
            "from __future__ import annotations\n\n"
            "from typing import Any, Awaitable, Callable, Literal, NotRequired, Optional, TypedDict, Union\n\n"
            f"#: The protocol version these types describe.\nPROTOCOL_VERSION = {self.schema['protocolVersion']}\n\n"
        )
        body = "\n\n\n".join(self.classes)
        aliases = "\n\n".join(self.aliases)
        return f"{head}\n{body}\n\n\n{aliases}\n\n\n{self.methods()}{self.tables()}"


def describe(node) -> str:
    return node.get("description", "").strip() if isinstance(node, dict) else ""


def docstring(text: str, indent: str) -> str:
    text = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    lines = text.split("\n")
    if len(lines) == 1:
        return f'"""{text}"""'
    return '"""' + f"\n{indent}".join(lines) + f'\n{indent}"""'


def comment(text: str) -> str:
    return "\n".join(f"#: {line}".rstrip() for line in text.split("\n"))


def quote_names(annotation: str) -> str:
    """Quotes the defined names in an annotation evaluated at import time (forward references),
    leaving the string literals of ``Literal[...]`` alone."""
    builtin = {"Any", "Literal", "Optional", "Union", "NotRequired", "None", "Awaitable", "Callable"}
    parts = re.split(r'("(?:[^"\\]|\\.)*")', annotation)
    for i in range(0, len(parts), 2):
        parts[i] = re.sub(r"\b([A-Z][A-Za-z0-9]*)\b", lambda m: m.group(1) if m.group(1) in builtin else f'"{m.group(1)}"', parts[i])
    return "".join(parts)


def python_name(method: str) -> str:
    """``session/navigateTree`` -> ``session_navigate_tree``."""
    snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", method.replace("$/", "").replace("/", "_"))
    return snake.lower()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--schema", type=Path, default=DEFAULT_SCHEMA)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    text = Generator(json.loads(args.schema.read_text(encoding="utf-8"))).render()
    current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
    if args.check:
        if text != current:
            print(f"{args.out} is stale: {args.schema} changed. Run python3 clients/python/scripts/generate.py", file=sys.stderr)
            return 1
        return 0
    if text != current:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
