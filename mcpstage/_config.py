"""The config ``.cursor/mcp.json``: merging operator content with fusion's, no I/O.

Theory of operation
-------------------
The config is shared: the operator owns every byte that is not a ``fusion-custom-tools-*``
server, fusion owns those servers. Each write is composed fresh (:func:`compose`): operator
content comes from the *current* bytes (whatever the operator last saved), with every
``fusion-custom-tools-*`` key removed from ``mcpServers``; fusion content comes from the lease
manifest only, one server per live lease, in key order. So an operator's servers survive every
write and a fusion entry the operator touched is recomposed from the manifest.

A config fusion can merge is UTF-8 JSON text whose value is an object whose ``mcpServers`` (if
present) is an object; anything else (invalid JSON or UTF-8, a bare ``NaN``, a list, a UTF-8 BOM,
nesting deeper than :data:`MAX_DEPTH`) is *unparsable* (:func:`parse` returns ``None``) and
quarantines the worktree rather than being overwritten.

Operator values are written back as the operator wrote them, as far as JSON can tell: every
number keeps its source text (``1e400`` stays ``1e400``, ``1.0`` stays ``1.0``; a Python float
would turn the first into ``Infinity``, which is not JSON), strings and key order are kept, and
a lone surrogate escape (``"\\ud800"``) is written as that escape. Only the layout changes (two
spaces of indentation), and of a key given twice in one object the last wins, as in
``JSON.parse``. Output is always valid UTF-8 JSON.

The bytes after the last lease goes (:func:`final`): the byte-exact baseline when no operator
edit latched; otherwise the operator's current bytes untouched when they hold no fusion key,
else those bytes' content without fusion keys (and no file at all when there was none at the
start and nothing but an empty ``mcpServers`` is left). Final bytes never hold a fusion key
(:func:`holds_fusion`): the exclusion marker goes only with the last of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ._manifest import KEY_PREFIX, Lease

SERVERS = "mcpServers"
MAX_DEPTH = 256  # deeper is unparsable: no config needs it, and writing it back recurses
INDENT = "  "


@dataclass(frozen=True)
class Number:
    """A JSON number as the operator wrote it (its source text, written back unchanged)."""

    text: str


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _depth(value: Any) -> int:
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            todo.extend(
                (child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


def parse(raw: bytes) -> dict[str, Any] | None:
    """The config as a mergeable object (numbers as :class:`Number`), or ``None``: unparsable."""
    try:
        text = raw.decode("utf-8")
        value = json.loads(
            text, parse_float=Number, parse_int=Number, parse_constant=_reject_constant
        )
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or _depth(value) > MAX_DEPTH:
        return None
    if not isinstance(value.get(SERVERS, {}), dict):
        return None
    return value


def holds_fusion(raw: bytes | None) -> bool:
    """Whether config bytes hold a ``fusion-custom-tools-*`` server (unparsable: the key's text
    anywhere, since nobody can tell)."""
    if raw is None:
        return False
    value = parse(raw)
    if value is None:
        return KEY_PREFIX.encode("ascii") in raw
    return bool(fusion_keys(value))


def fusion_keys(value: dict[str, Any]) -> list[str]:
    """The ``fusion-custom-tools-*`` server keys of a parsed config."""
    servers: dict[str, Any] = value.get(SERVERS, {})
    return [key for key in servers if key.startswith(KEY_PREFIX)]


def _strip(value: dict[str, Any]) -> dict[str, Any]:
    servers: dict[str, Any] = value.get(SERVERS, {})
    result = dict(value)
    result[SERVERS] = {k: v for k, v in servers.items() if not k.startswith(KEY_PREFIX)}
    return result


_SURROGATE = re.compile("[\ud800-\udfff]")


def _string(text: str) -> str:
    quoted = json.encoder.encode_basestring(text)
    return _SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", quoted)


def _chunks(value: Any, level: int) -> Iterator[str]:
    """``json.dumps(value, indent=2, ensure_ascii=False)``, with :class:`Number` texts."""
    if isinstance(value, Number):
        yield value.text
    elif isinstance(value, str):
        yield _string(value)
    elif value is None or isinstance(value, bool):
        yield json.dumps(value)
    elif isinstance(value, int | float):  # fusion's own values (never operator text)
        yield json.dumps(value, allow_nan=False)
    elif isinstance(value, dict | list):
        if not value:
            yield "{}" if isinstance(value, dict) else "[]"
            return
        inner = "\n" + INDENT * (level + 1)
        yield "{" if isinstance(value, dict) else "["
        items = value.items() if isinstance(value, dict) else ((None, item) for item in value)
        for at, (key, item) in enumerate(items):
            yield inner if at == 0 else "," + inner
            if key is not None:
                yield _string(key) + ": "
            yield from _chunks(item, level + 1)
        yield "\n" + INDENT * level + ("}" if isinstance(value, dict) else "]")
    else:
        raise TypeError(f"not a JSON value: {value!r}")


def serialize(value: dict[str, Any]) -> bytes:
    """The config's bytes: always valid UTF-8 JSON (see the module docstring)."""
    return ("".join(_chunks(value, 0)) + "\n").encode("utf-8")


def compose(current: bytes | None, leases: Iterable[Lease]) -> bytes:
    """Operator content of ``current`` plus one server per lease (``ValueError`` if unparsable)."""
    value: dict[str, Any] | None = {} if current is None else parse(current)
    if value is None:
        raise ValueError("the config does not parse")
    result = _strip(value)
    for lease in sorted(leases, key=lambda each: each.key):
        result[SERVERS][lease.key] = lease.entry.to_json()
    return serialize(result)


def final(current: bytes | None, baseline: bytes | None, operator_edit: bool) -> bytes | None:
    """The config once no lease is left (``None``: no file); see the module docstring."""
    if not operator_edit and not holds_fusion(baseline):
        return baseline
    if not operator_edit:
        current = baseline  # a baseline with fusion servers (an older manifest's): strip them
    if current is None:
        return None
    value = parse(current)
    if value is None:
        raise ValueError("the config does not parse")
    if not fusion_keys(value):
        return current
    stripped = _strip(value)
    if baseline is None and stripped == {SERVERS: {}}:
        return None
    return serialize(stripped)


def clears_quarantine(current: bytes | None) -> bool:
    """Whether the operator repaired the config: deleted, or valid without fusion keys."""
    if current is None:
        return True
    value = parse(current)
    return value is not None and not fusion_keys(value)
