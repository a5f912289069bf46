"""MkDocs hook: the reference pages rendered from the code's own tables at build time.

``docs/reference/options.md`` gets the options table from ``pytest_maxcode.options``
(``OPTIONS`` and ``SETTINGS_DEFAULTS``), and ``docs/reference/report.md`` the report schema
from ``pytest_maxcode/report/schema.json``, so neither page can drift from the code.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the checkout's package, installed or not

OPTIONS_MARKER = "<!-- options-table -->"
SETTINGS_MARKER = "<!-- settings-table -->"
SCHEMA_MARKER = "<!-- report-schema -->"

#: [tool.maxcode] keys that no command-line option spells: what each holds
FILE_ONLY_HELP = {
    "torch_compile": "the built-in policy's `torch.compile` variants of the reference",
    "llm_retries": "retries of a 408/409/429/5xx reply, by the SDK with exponential backoff",
    "llm_cache": "answer a repeated LLM request from the store (it then costs nothing)",
    "max_tokens": "the reply's token limit, per LLM request",
    "temperature": "sampling temperature, per LLM request",
    "prices": "USD per million tokens, per model: `{input, output, cache_write, cache_read}` ([Using an LLM](../how-to/llm.md#cost))",
    "qd": "the `qd` strategy's staged schedule of permitted techniques ([Configuration](../how-to/configuration.md#staged-quality-diversity))",
    "regressions": "`maxcode compare`: `threshold` and per-glob `thresholds` ([The CI bot](../how-to/ci-bot.md#maxcode-compare))",
    "programs": "C++ program targets, one table each ([C++ programs as targets](../how-to/programs.md))",
}


def _cell(text: Any) -> str:
    return str(text).replace("%%", "%").replace("|", "\\|").replace("\n", " ")


def _default(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int) and value >= 1 << 20:
        return f"`{value >> 30}G`" if value % (1 << 30) == 0 else f"`{value}`"
    return f"`{value}`"


def options_table() -> str:
    from pytest_maxcode.options import OPTIONS, SETTINGS_DEFAULTS

    rows = [
        "| `pytest` option | `maxcode check` option | `[tool.maxcode]` key | default | what it does |",
        "| --- | --- | --- | --- | --- |",
        "| `--maxcode` | | | off | record the targets' inputs while the tests run, then optimize the marked targets |",
    ]
    for opt in OPTIONS:
        pytest_flag = f"`{opt.flag('maxcode-')}`" if "pytest" in opt.scopes else ""
        check_flag = f"`{opt.flag()}`" if "check" in opt.scopes else ""
        key = "json" if opt.name == "json_path" else opt.name
        in_file = opt.name in SETTINGS_DEFAULTS and "pytest" in opt.scopes
        default = SETTINGS_DEFAULTS[opt.name] if in_file else opt.default
        help_text = _cell(opt.help)
        if opt.choices:
            help_text += " (one of " + ", ".join(f"`{c}`" for c in opt.choices) + ")"
        rows.append(f"| {pytest_flag} | {check_flag} | {f'`{key}`' if in_file else ''} | {_default(default)} | {help_text} |")
    return "\n".join(rows) + "\n"


def settings_table() -> str:
    from pytest_maxcode.options import OPTIONS, SETTINGS_DEFAULTS

    spelled = {o.name for o in OPTIONS if "pytest" in o.scopes}
    rows = ["| `[tool.maxcode]` key | default | what it holds |", "| --- | --- | --- |"]
    for key, default in SETTINGS_DEFAULTS.items():
        if key in spelled and key != "llm_retries":
            continue
        rows.append(f"| `{key}` | {_default(default)} | {FILE_ONLY_HELP.get(key, '')} |")
    return "\n".join(rows) + "\n"


# -- the report schema ------------------------------------------------------------------------


def _type(spec: dict[str, Any]) -> str:
    if "$ref" in spec:
        name = spec["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#def-{name})"
    if "const" in spec:
        return f"`{json.dumps(spec['const'])}`"
    if "enum" in spec:
        return " \\| ".join(f"`{v}`" for v in spec["enum"])
    if "oneOf" in spec:
        return " or ".join(_type(s) for s in spec["oneOf"])
    t = spec.get("type")
    if t == "array" and "items" in spec:
        items = spec["items"]
        if isinstance(items, list):
            return "array: [" + ", ".join(_type(i) for i in items) + "]"
        return f"array of {_type(items)}"
    if t == "object" and "additionalProperties" in spec and isinstance(spec["additionalProperties"], dict):
        return f"object of {_type(spec['additionalProperties'])}"
    if isinstance(t, list):
        return " or ".join(t)
    return str(t or "any")


def _fields(spec: dict[str, Any]) -> str:
    required = set(spec.get("required", []))
    rows = ["| field | type | required | description |", "| --- | --- | --- | --- |"]
    for name, prop in spec.get("properties", {}).items():
        rows.append(f"| `{name}` | {_type(prop)} | {'yes' if name in required else ''} | {_cell(prop.get('description', ''))} |")
    return "\n".join(rows) + "\n"


def _object_of(spec: dict[str, Any]) -> dict[str, Any] | None:
    if "properties" in spec:
        return spec
    for alt in spec.get("oneOf", []):
        if "properties" in alt:
            return alt
    return None


def schema_reference() -> str:
    schema = json.loads((ROOT / "pytest_maxcode" / "report" / "schema.json").read_text())
    out = [f"**{_cell(schema.get('title', 'report'))}** (`schema_version` "
           f"{schema['properties']['schema_version'].get('const')}). {_cell(schema.get('description', ''))}\n",
           "### The report { #def-report }\n", _fields(schema)]
    values = ["| type | is | description |", "| --- | --- | --- |"]
    objects = []
    for name, spec in schema.get("$defs", {}).items():
        obj = _object_of(spec)
        if obj is None:
            values.append(f"| <span id=\"def-{name}\"></span>`{name}` | {_type(spec)} | {_cell(spec.get('description', ''))} |")
            continue
        nullable = " (or null)" if obj is not spec else ""
        desc = _cell(spec.get("description", obj.get("description", "")))
        objects.append(f"### {name} {{ #def-{name} }}\n\nAn object{nullable}. {desc}\n\n{_fields(obj)}")
    out += objects
    out.append("### Value types\n\n" + "\n".join(values) + "\n")
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if OPTIONS_MARKER in markdown:
        markdown = markdown.replace(OPTIONS_MARKER, options_table())
    if SETTINGS_MARKER in markdown:
        markdown = markdown.replace(SETTINGS_MARKER, settings_table())
    if SCHEMA_MARKER in markdown:
        markdown = markdown.replace(SCHEMA_MARKER, schema_reference())
    return markdown
