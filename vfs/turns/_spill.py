"""The spill rewrite, pure part: where native web tools spill, and how results and inputs change.

Theory of operation
-------------------
Native ``webSearch``/``webFetch`` keep writing large output to ``{cwd}/agent-tools/{uuid}.txt``
on the host disk (``cwd`` is the harness's). Under an authored root the model never sees that
directory: a turn copies the file to its own ``/tmp/{uuid}.txt`` (``vfs.turns._turn``) and the
text the model reads is rewritten here. There are exactly two modes (:class:`SpillScope.overlay`):

============  ==================================  ====================================
              host-default (root unset)           overlay (root set)
============  ==================================  ====================================
path          ``{cwd}/agent-tools/{uuid}.txt``    ``/tmp/{uuid}.txt``
follow-up     the native text, untouched          ``Use Read or Grep on /tmp/{uuid}.txt.``
============  ==================================  ====================================

Everything here is a plain function over plain values (no event loop; the only I/O is resolving
the cwd's symlinks, once per scope):

- :func:`spill_references` finds the spill files a result names: only paths of the exact form
  ``{cwd}/agent-tools/{uuid}.txt`` (a canonical uuid, the ``cwd`` as given or with symlinks
  resolved), on a path boundary (``/x{cwd}/...`` and ``{uuid}.txt.bak`` are not references).
  Other paths in the text are not references, whatever they look like.
- :func:`rewrite_result` replaces those paths, in every string of a result (nested dicts and
  lists too, so a structured ``output_location`` is covered), by ``/tmp/{uuid}.txt``, but only for
  the uuids it is given (the files actually adopted). A string that *is* the path becomes the
  ``/tmp`` path; in running text the follow-up changes too: the sentence after the one naming the
  path (or that sentence itself) is replaced when it recommends a native follow-up (shell,
  ``grep``, ``read_file``, ``cat``...), else the overlay follow-up is inserted after it. Dict keys
  and non-string leaves are never touched. Nothing to rewrite returns the very same object.
- :func:`rewrite_tool_input` rewrites the path argument of Read and Grep (and their native
  aliases) when it still holds the host spill path; any other tool, argument or path is returned
  as is (``/agent-tools/{uuid}.txt`` is an ordinary root path, not the harness's directory).
  :func:`rewrite_input_path` is that decision for one path; the Read and Grep a turn binds
  apply it to their own input, so a harness need not call either.

Which tools count: results of ``webSearch``/``webFetch`` (any case, ``_``/``-`` spellings);
inputs of ``Read``/``Grep`` and their aliases ``read_file``/``grep_search``/``search``.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol, TypeVar

SPILL_DIR = "agent-tools"
SCRATCH = "/tmp"
UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_SPILL_NAME = re.compile(rf"({UUID})\.txt")

WEB_TOOLS = frozenset({"websearch", "webfetch"})
# Read and Grep, and their runtime aliases (``search`` names Grep, never SemanticSearch).
READ_GREP_TOOLS = frozenset({"read", "readfile", "grep", "grepsearch", "search"})
# The argument names Read and Grep take a path under (``vfs.tools`` accepts these aliases).
PATH_ARGUMENTS = (
    "path",
    "file_path",
    "filePath",
    "target_file",
    "targetFile",
    "target_directory",
    "targetDirectory",
    "directory",
)
# Words of a native follow-up ("use grep or read_file", "run cat in the shell").
_NATIVE_FOLLOW_UP = re.compile(
    r"\b(?:shell|terminal|run_terminal_cmd|read_file|grep|rg|ripgrep|cat|head|tail|sed|awk|less)\b"
)
# A sentence ends at . ! ? (then closing quotes or brackets) before whitespace or the line's end.
_SENTENCE_END = re.compile(r"[.!?]+[\"')\]}]*(?:\s+|$)")

T = TypeVar("T")


class HasSpillScope(Protocol):
    """Anything that knows its turn's :class:`SpillScope` (a :class:`vfs.turns.Turn`)."""

    @property
    def spill_scope(self) -> SpillScope: ...


def _tool_key(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def is_web_tool(tool_name: str) -> bool:
    """Whether results of ``tool_name`` may name a spill: native webSearch or webFetch."""
    return _tool_key(tool_name) in WEB_TOOLS


def is_read_or_grep(tool_name: str) -> bool:
    """Whether ``tool_name`` is Read or Grep (or a native alias of one)."""
    return _tool_key(tool_name) in READ_GREP_TOOLS


def scratch_path(uuid: str) -> str:
    """Where a spill lands in the turn's tree: ``/tmp/{uuid}.txt``."""
    return f"{SCRATCH}/{uuid}.txt"


def follow_up(uuid: str) -> str:
    """The overlay follow-up sentence."""
    return f"Use Read or Grep on {scratch_path(uuid)}."


@dataclass(frozen=True)
class SpillScope:
    """Where one turn's native tools spill, and which mode rewrites it.

    ``cwd`` is the harness's working directory (absolute); ``overlay`` is true under an authored
    root and false on the host-default path, where nothing is ever rewritten.
    """

    cwd: str
    overlay: bool

    def __post_init__(self) -> None:
        if not os.path.isabs(self.cwd):
            raise ValueError(f"the harness cwd must be absolute: {self.cwd!r}")

    @classmethod
    def of(cls, cwd: str | os.PathLike[str] | None, *, overlay: bool) -> SpillScope:
        """The scope of ``cwd`` (relative to this process's cwd; ``None`` means it)."""
        return cls(os.path.abspath(os.fspath(cwd if cwd is not None else os.getcwd())), overlay)

    @property
    def spill_dir(self) -> str:
        """``{cwd}/agent-tools``, the host directory native tools spill into."""
        return posixpath.join(posixpath.normpath(self.cwd), SPILL_DIR)

    def host_path(self, uuid: str) -> str:
        return f"{self.spill_dir}/{uuid}.txt"

    @cached_property
    def _spill_dirs(self) -> tuple[str, ...]:
        """The spill directory as given and with symlinks resolved (either may be printed)."""
        given = self.spill_dir
        resolved = posixpath.join(os.path.realpath(self.cwd), SPILL_DIR)
        return (given,) if resolved == given else (given, resolved)

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        dirs = "|".join(re.escape(d) for d in sorted(self._spill_dirs, key=len, reverse=True))
        # On a path boundary: nothing path-like before, no further name characters after
        # (a sentence's full stop may follow).
        return re.compile(rf"(?<![\w./-])(?:{dirs})/({UUID})\.txt(?!\.?[\w/-])")

    def references(self, text: str) -> list[str]:
        """The uuids of spill paths in ``text``, in order of first appearance."""
        seen: dict[str, None] = {}
        for match in self.pattern.finditer(text):
            seen.setdefault(match.group(1), None)
        return list(seen)

    def without_references(self, text: str) -> str:
        """``text`` with every spill path cut out."""
        return self.pattern.sub("", text)

    def spill_uuid(self, path: str) -> str | None:
        """The uuid when ``path`` is exactly a spill path of this scope (after ``normpath``)."""
        if not posixpath.isabs(path):
            return None
        path = posixpath.normpath(path)
        directory, name = posixpath.split(path)
        match = _SPILL_NAME.fullmatch(name)
        if match is None or directory not in self._spill_dirs:
            return None
        return match.group(1)


def spill_references(result: object, scope: SpillScope) -> list[str]:
    """The uuids of the spill files that ``result`` (a string or nested dicts/lists) names."""
    seen: dict[str, None] = {}
    for text in _strings(result):
        for uuid in scope.references(text):
            seen.setdefault(uuid, None)
    return list(seen)


def _strings(value: object) -> list[str]:
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, Mapping):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
    return found


def rewrite_result(result: T, scope: SpillScope, adopted: Collection[str]) -> T:
    """``result`` with the spill paths of the ``adopted`` uuids moved to ``/tmp`` (see the module
    docstring); ``result`` itself when nothing changes (and always in host-default mode)."""
    if not scope.overlay or not adopted:
        return result
    return _rewrite(result, scope, frozenset(adopted))


def _rewrite(value: T, scope: SpillScope, adopted: frozenset[str]) -> T:
    if isinstance(value, str):
        return _rewrite_text(value, scope, adopted)  # type: ignore[return-value]
    if isinstance(value, Mapping):
        items = {key: _rewrite(item, scope, adopted) for key, item in value.items()}
        if all(items[key] is item for key, item in value.items()):
            return value
        return dict(items)  # type: ignore[return-value]
    if isinstance(value, (list, tuple)):
        rewritten = [_rewrite(item, scope, adopted) for item in value]
        if all(new is old for new, old in zip(rewritten, value, strict=True)):
            return value
        return type(value)(rewritten)
    return value


def _rewrite_text(text: str, scope: SpillScope, adopted: frozenset[str]) -> str:
    if not any(uuid in adopted for uuid in scope.references(text)):
        return text
    uuid = scope.spill_uuid(text.strip())
    if uuid is not None:  # the string is the path (a structured field): no follow-up
        return text.replace(text.strip(), scratch_path(uuid))
    lines = text.split("\n")
    for index, line in enumerate(lines):
        if any(uuid in adopted for uuid in scope.references(line)):
            lines[index] = _rewrite_line(line, scope, adopted)
    return "\n".join(lines)


def _sentences(line: str) -> list[str]:
    """``line`` cut after each sentence end (the pieces join back to ``line``)."""
    pieces = []
    start = 0
    for match in _SENTENCE_END.finditer(line):
        pieces.append(line[start : match.end()])
        start = match.end()
    if start < len(line):
        pieces.append(line[start:])
    return pieces


def _rewrite_line(line: str, scope: SpillScope, adopted: frozenset[str]) -> str:
    """One line that names adopted spills: paths moved, native follow-up replaced."""
    pieces = _sentences(line)
    out: list[str] = []
    index = 0
    while index < len(pieces):
        sentence = pieces[index]
        index += 1
        named = [uuid for uuid in scope.references(sentence) if uuid in adopted]
        if not named:
            out.append(sentence)
            continue
        advice = " ".join(follow_up(uuid) for uuid in named)
        if _NATIVE_FOLLOW_UP.search(scope.without_references(sentence)):
            out.append(_keep_space(sentence, advice))  # the sentence is the native follow-up
            continue
        moved = _move_paths(sentence, scope, adopted)
        following = pieces[index] if index < len(pieces) else None
        if (
            following is not None
            and not scope.references(following)
            and _NATIVE_FOLLOW_UP.search(following)
        ):
            out += [moved, _keep_space(following, advice)]
            index += 1
        else:
            out.append(_append_sentence(moved, advice))
    return "".join(out)


def _move_paths(text: str, scope: SpillScope, adopted: frozenset[str]) -> str:
    def move(match: re.Match[str]) -> str:
        uuid = match.group(1)
        return scratch_path(uuid) if uuid in adopted else match.group(0)

    return scope.pattern.sub(move, text)


def _keep_space(sentence: str, replacement: str) -> str:
    """``replacement`` in place of ``sentence``, keeping its surrounding whitespace and the
    closing brackets or quotes it ends with but does not open (``...it.]`` keeps the ``]``)."""
    lead = sentence[: len(sentence) - len(sentence.lstrip())]
    body = sentence.strip()
    trail = sentence[len(sentence.rstrip()) :]
    end = re.search(r"[.!?]*([\"')\]}]*)$", body)
    closers = ""
    for char in end.group(1) if end else "":
        opener = _OPENERS[char]
        unmatched = (
            body.count(char) % 2 == 1 if opener == char else body.count(char) > body.count(opener)
        )
        if unmatched:
            closers += char
    return lead + replacement + closers + trail


_OPENERS = {")": "(", "]": "[", "}": "{", '"': '"', "'": "'"}


def _append_sentence(sentence: str, addition: str) -> str:
    body = sentence.rstrip()
    trail = sentence[len(body) :]
    joiner = " " if body.endswith((".", "!", "?", ")", "]", '"', "'")) else ". "
    return body + joiner + addition + trail


def rewrite_input_path(path: str, scope: SpillScope) -> str:
    """The path a Read/Grep path argument means: ``/tmp/{uuid}.txt`` for the host spill path
    ``{cwd}/agent-tools/{uuid}.txt`` in overlay mode, else ``path`` itself."""
    if not scope.overlay:
        return path
    uuid = scope.spill_uuid(path)
    return path if uuid is None else scratch_path(uuid)


def rewrite_tool_input(
    tool_name: str, arguments: Mapping[str, object], turn: SpillScope | HasSpillScope
) -> Mapping[str, object]:
    """Read/Grep ``arguments`` with a host spill path ``{cwd}/agent-tools/{uuid}.txt`` moved to
    ``/tmp/{uuid}.txt`` (overlay mode only); the same mapping when nothing changes. The tools a
    turn binds (:meth:`vfs.turns.Turn.bind_tools`) do this themselves."""
    scope = turn if isinstance(turn, SpillScope) else turn.spill_scope
    if not scope.overlay or not is_read_or_grep(tool_name):
        return arguments
    changed: dict[str, object] = {}
    for key in PATH_ARGUMENTS:
        value = arguments.get(key)
        if isinstance(value, str):
            moved = rewrite_input_path(value, scope)
            if moved is not value:
                changed[key] = moved
    if not changed:
        return arguments
    return {**arguments, **changed}
