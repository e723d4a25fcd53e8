"""The config ``.cursor/mcp.json``: merging operator content with fusion's, no I/O.

Theory of operation
-------------------
The config is shared: the operator owns every byte that is not a ``fusion-custom-tools-*``
server, fusion owns those servers. Each write is composed fresh (:func:`compose`): operator
content comes from the *current* bytes (whatever the operator last saved), with every
``fusion-custom-tools-*`` key removed from ``mcpServers``; fusion content comes from the lease
manifest only, one server per live lease, in key order. So an operator's servers survive every
write and a fusion entry the operator touched is recomposed from the manifest.

A config fusion can merge is a JSON object whose ``mcpServers`` (if present) is an object;
anything else (invalid JSON, a bare ``NaN``, a list, a UTF-8 BOM) is *unparsable*
(:func:`parse` returns ``None``) and quarantines the worktree rather than being overwritten.

The bytes after the last lease goes (:func:`final`): the byte-exact baseline when no operator
edit latched; otherwise the operator's current bytes untouched when they hold no fusion key,
else those bytes' content without fusion keys (and no file at all when there was none at the
start and nothing but an empty ``mcpServers`` is left).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ._manifest import KEY_PREFIX, Lease

SERVERS = "mcpServers"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse(raw: bytes) -> dict[str, Any] | None:
    """The config as a mergeable object, or ``None`` when it is unparsable."""
    try:
        value = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    if not isinstance(value.get(SERVERS, {}), dict):
        return None
    return value


def fusion_keys(value: dict[str, Any]) -> list[str]:
    """The ``fusion-custom-tools-*`` server keys of a parsed config."""
    servers: dict[str, Any] = value.get(SERVERS, {})
    return [key for key in servers if key.startswith(KEY_PREFIX)]


def _strip(value: dict[str, Any]) -> dict[str, Any]:
    servers: dict[str, Any] = value.get(SERVERS, {})
    result = dict(value)
    result[SERVERS] = {k: v for k, v in servers.items() if not k.startswith(KEY_PREFIX)}
    return result


def serialize(value: dict[str, Any]) -> bytes:
    return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


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
    if not operator_edit:
        return baseline
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
