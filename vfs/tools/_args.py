"""Tool arguments: the declared parameters of a tool, their native aliases, and validation.

Theory of operation
-------------------
A tool declares its parameters (:class:`Param`): a canonical name (the one its JSON schema
advertises), a JSON type, whether it is required, and the *aliases* native harnesses and models
use for it (``old_string`` for ``oldText``, ``file_path``/``target_file`` for ``path`` ...).
:func:`parse_arguments` maps a model's raw ``arguments`` onto the canonical names, then checks
them, and either returns a plain ``{canonical: value}`` dict or raises :class:`ArgumentError`
with a sentence that names the tool and the problem. It never guesses:

* an argument no parameter declares is refused (``Read: unknown argument: foo``), except
  ``explanation``, which every Cursor native carries and which is ignored;
* a canonical name and an alias given with different values is refused as a conflict;
* types are JSON's: a ``boolean`` is ``true``/``false`` only, an ``integer`` is an int (or a
  float with no fraction, as some JSON encoders send) and never a boolean, a ``string`` is a
  string, an ``array`` of strings is a list of strings; ``null`` means "not given";
* integer bounds (``minimum``) and enumerations are checked here, so tool bodies get clean values;
* text is Unicode: a string holding a lone surrogate (JSON can spell ``"\ud800"``) is refused,
  except in an argument that names a path (``names_a_path``), which goes to the tree as given:
  a surrogate-escaped byte there names a host file whose name is not UTF-8, and any other lone
  surrogate is the tree's ``InvalidPathError``.

Pure: no I/O, no state.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

JsonType = Literal["string", "integer", "boolean", "array"]

IGNORED_ARGUMENTS = frozenset({"explanation"})
"""Arguments accepted by every tool and ignored (Cursor natives ask the model to explain)."""


class ArgumentError(ValueError):
    """A tool was called with arguments it cannot take; ``str()`` is the model-facing message."""


@dataclass(frozen=True, slots=True)
class Param:
    """One declared parameter of a tool."""

    name: str
    type: JsonType
    description: str
    required: bool = False
    aliases: tuple[str, ...] = ()
    minimum: int | None = None
    enum: tuple[str, ...] = ()
    default: object = None
    names_a_path: bool = False

    def schema(self) -> dict[str, Any]:
        """This parameter as a JSON-schema property."""
        prop: dict[str, Any] = {"type": self.type, "description": self.description}
        if self.type == "array":
            prop["items"] = {"type": "string"}
        if self.minimum is not None:
            prop["minimum"] = self.minimum
        if self.enum:
            prop["enum"] = list(self.enum)
        if self.default is not None:
            prop["default"] = self.default
        return prop


def input_schema(params: tuple[Param, ...]) -> dict[str, Any]:
    """The JSON schema (draft 2020-12 subset) of a tool taking ``params``; a fresh dict."""
    return {
        "type": "object",
        "properties": {param.name: param.schema() for param in params},
        "required": [param.name for param in params if param.required],
        "additionalProperties": False,
    }


def parse_arguments(
    tool: str, params: tuple[Param, ...], arguments: Mapping[str, object]
) -> dict[str, object]:
    """Canonical, validated arguments (see the module docstring); absent optionals are omitted
    unless they have a default. Raises :class:`ArgumentError`."""
    if not isinstance(arguments, Mapping):
        raise ArgumentError(f"{tool}: arguments must be an object, not {_json_type(arguments)}")
    by_name: dict[str, Param] = {}
    for param in params:
        for spelling in (param.name, *param.aliases):
            by_name[spelling] = param
    given: dict[str, tuple[str, object]] = {}  # canonical -> (spelling used, value)
    for spelling, value in arguments.items():
        if not isinstance(spelling, str):
            raise ArgumentError(f"{tool}: argument names must be strings, not {spelling!r}")
        param_or_none = by_name.get(spelling)
        if param_or_none is None:
            if spelling in IGNORED_ARGUMENTS:
                continue
            raise ArgumentError(f"{tool}: unknown argument: {spelling}")
        if value is None:
            continue
        earlier = given.get(param_or_none.name)
        if earlier is not None and earlier[1] != value:
            raise ArgumentError(f"{tool}: conflicting arguments: {earlier[0]} and {spelling}")
        given[param_or_none.name] = (spelling, value)
    parsed: dict[str, object] = {}
    for param in params:
        if param.name in given:
            spelling, value = given[param.name]
            parsed[param.name] = _check(tool, param, spelling, value)
        elif param.required:
            raise ArgumentError(f"{tool}: missing required argument: {param.name}")
        elif param.default is not None:
            parsed[param.name] = param.default
    return parsed


def _check(tool: str, param: Param, spelling: str, value: object) -> object:
    where = f"{tool}: {spelling}"
    if param.type == "string":
        if not isinstance(value, str):
            raise ArgumentError(f"{where} must be a string, not {_json_type(value)}")
        if not param.names_a_path:
            _check_text(where, value)
        if param.enum and value not in param.enum:
            choices = ", ".join(param.enum)
            raise ArgumentError(f"{where} must be one of {choices}, not {value!r}")
        return value
    if param.type == "boolean":
        if not isinstance(value, bool):
            raise ArgumentError(f"{where} must be a boolean, not {_json_type(value)}")
        return value
    if param.type == "integer":
        number: int
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ArgumentError(f"{where} must be an integer, not {_json_type(value)}")
        if isinstance(value, float):
            if not value.is_integer():
                raise ArgumentError(f"{where} must be an integer, not {value!r}")
            number = int(value)
        else:
            number = value
        if param.minimum is not None and number < param.minimum:
            raise ArgumentError(f"{where} must be at least {param.minimum}, not {number}")
        return number
    # "array" of strings
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ArgumentError(f"{where} must be an array of strings, not {_json_type(value)}")
    if not param.names_a_path:
        for item in value:
            _check_text(where, item)
    return list(value)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_text(where: str, value: str) -> None:
    found = None if value.isascii() else _SURROGATE.search(value)
    if found is not None:
        code = ord(found.group())
        raise ArgumentError(
            f"{where} holds a lone surrogate (U+{code:04X}) at character {found.start()}, "
            "which is not text"
        )


def _json_type(value: object) -> str:
    """How JSON would name the type of ``value`` (for messages)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__
