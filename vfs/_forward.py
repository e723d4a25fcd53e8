"""One table of the verbs, and the forwarding bases every wrapper is built on.

Theory of operation
-------------------
:data:`TREE_VERBS` is every method a tree may have, the contract's and the optional ones;
:data:`FILE_VERBS` the same for open files. Each row is a :class:`Verb`: its name, the protocol
that declares it (its signature is that protocol's), what it does (``kind``: reads, lists,
creates, changes, ...), which of its arguments are paths and what it does at each
(:class:`PathArg`: looks, makes a new name, writes in place or removes; whether a final symlink
is followed), how a listing's results name their paths, the flags that turn a look into a write
(``open``), and whether it is optional (a capability: ``link``, ``list_info_reusing``, an open
file's ``stat``...).

:class:`ForwardingTree` and :class:`ForwardingFile` forward every verb of their table to
``self._inner``, and a wrapper is a subclass that overrides the one hook it needs:

- ``_around(verb, args)`` sees every call of a verb that returns an awaitable; ``args`` holds
  every argument of the call in the order of the signature (``Verb.params``), defaults filled
  in, so a hook reads them by position, and :meth:`Verb.call` makes the call on a tree. The
  default returns ``verb.call(self._inner, args)`` itself: a plain forward adds no coroutine.
- ``_around_stream(verb, args)`` the same for the verbs that return an async iterator
  (``list``, ``glob``, ``grep``, ``search``).
- ``watch`` and ``buffers_writes`` are forwarded as they are (nothing to decide about them).

So a verb added to the table reaches every wrapper's hook, which decides by the row's data
(paths, kind) what it does with it; no wrapper re-declares a signature.

Capabilities: a wrapper has an optional verb exactly when what it wraps has it. ``_forward_to``
(called once, in the wrapper's ``__init__``) sets ``_inner`` and switches the instance's class to
a subclass that adds the forwarders of the capabilities ``inner`` has (one such class per wrapper
class and set of capabilities, made once). The wrapper class's own definitions come first in that
subclass, so a wrapper that defines a capability itself (the turn root's scratch slot reports its
own changes) always has it; the switch costs nothing per call. Static types show the contract's
verbs only: an optional verb is checked for (``isinstance(tree, vfs.MakesLinks)``, or the helpers
of :mod:`vfs._capabilities`), as on any tree.

Invariants: a forwarder returns what the hook returns, and a hook that does work is an
``async def``: an error is raised where the caller awaits the call, never where it creates it
(``union_fs`` creates a call before it awaits it inside its error translation). ``_inner`` may
be reassigned (the scratch slot swaps trees, cow's lower handles rebind) to an object with the
same capabilities.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

from ._merge import aclose
from ._types import (
    BuffersWrites,
    Checkpoints,
    FileSystem,
    ListsReusing,
    ListsWithInfo,
    MakesLinks,
    MakesNodes,
    OpenFile,
    PosixFileSystem,
    ReadsBytes,
    StatsOpenFile,
    UnlinksKeeping,
    Watchable,
)

F = TypeVar("F", bound=Callable[..., Any])

Keep = Callable[[str, str], bool]
"""Whether to keep a listing's result, from its path and kind (``"file"`` for a hit)."""

VerbKind = Literal["reads", "lists", "creates", "changes", "syncs", "closes"]
"""What a verb does: looks (``reads``), walks a directory (``lists``), makes a new name
(``creates``), changes or removes what is there (``changes``); for open files also ``syncs``
(flush, fsync) and ``closes``."""

Access = Literal["look", "make", "write", "remove"]
"""What a call does at one of its paths: looks at it, makes a new name there, writes the entry
in place (bytes or attributes) or removes it (``rename`` removes its source name and whatever
its target name held)."""

Entry = Literal["file", "directory", "any"]
"""What a path argument names, where the verb says (``mkdir``/``rmdir``: a directory)."""

Shape = Literal["call", "stream", "sync", "value"]
"""``call``: returns an awaitable; ``stream``: an async iterator; ``sync``: a plain method
(``watch``); ``value``: an attribute (``buffers_writes``)."""

Results = Literal["", "entries", "hits", "listing", "named"]
"""How each result of a listing verb names its path: ``entries`` are :class:`vfs.DirEntry`,
``hits`` grep or search results (each in a file), ``listing`` ``(DirEntry, FileInfo)`` pairs,
``named`` ``(name, FileInfo)`` pairs of the listed directory."""


@dataclass(frozen=True, slots=True)
class PathArg:
    """A parameter that is a path: what the call does there (``access``), what it names, and
    whether a final symlink is followed. ``field`` names the attribute that holds the path when
    the argument is a query (``grep``, ``search``). ``parents``: the call creates missing parent
    directories (``write``)."""

    name: str
    access: Access = "look"
    entry: Entry = "any"
    follows: bool = False
    field: str = ""
    parents: bool = False


@dataclass(frozen=True, slots=True, eq=False)
class Verb:
    """One row of a table: a method of a tree or an open file (see the module docstring).
    Rows compare (and hash) by identity: each is one verb."""

    name: str
    protocol: type
    kind: VerbKind
    paths: tuple[PathArg, ...] = ()
    shape: Shape = "call"
    results: Results = ""
    writes_with: tuple[str, ...] = ()
    optional: bool = False
    # Derived from the row and the protocol's signature (see __post_init__).
    changing: bool = field(init=False, repr=False, compare=False)
    """Whether every call of this verb creates or changes something."""
    plain_look: bool = field(init=False, repr=False, compare=False)
    """Whether the verb only looks at its one path, its first argument, without following a
    final symlink (``lstat``, ``readlink``): what a hook may decide fastest."""
    params: tuple[str, ...] = field(init=False, repr=False, compare=False)
    call: Callable[[Any, tuple[Any, ...]], Any] = field(init=False, repr=False, compare=False)
    forwarder: Callable[..., Any] = field(init=False, repr=False, compare=False)
    path_at: tuple[int, ...] = field(init=False, repr=False, compare=False)
    """Where each of ``paths`` is in a call's ``args``."""
    _writes_at: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        params: tuple[inspect.Parameter, ...] = ()
        if self.shape != "value":
            method = getattr(self.protocol, self.name)
            params = tuple(inspect.signature(method).parameters.values())[1:]
        names = tuple(param.name for param in params)
        set_field = object.__setattr__
        set_field(self, "changing", self.kind in ("creates", "changes"))
        plain = (
            self.kind == "reads"
            and len(self.paths) == 1
            and self.paths[0] == PathArg(names[0] if names else "")
            and not self.writes_with
        )
        set_field(self, "plain_look", plain)
        set_field(self, "params", names)
        set_field(self, "path_at", tuple(names.index(arg.name) for arg in self.paths))
        set_field(self, "_writes_at", tuple(names.index(name) for name in self.writes_with))
        set_field(self, "call", _caller(self.name, params))
        set_field(self, "forwarder", _forwarder(self, params))

    def changes(self, args: tuple[Any, ...]) -> bool:
        """Whether this call creates or changes something (``open`` for writing does)."""
        if self.changing:
            return True
        return any(args[index] for index in self._writes_at)

    def access(self, arg: PathArg, args: tuple[Any, ...]) -> Access:
        """What this call does at ``arg``: its row's access, ``write`` for a look whose
        ``writes_with`` flags are set."""
        if arg.access == "look" and self._writes_at and self.changes(args):
            return "write"
        return arg.access

    def path_values(self, args: tuple[Any, ...]) -> tuple[str, ...]:
        """The paths this call names (as given: not normalized), in the order of ``paths``."""
        if len(self.path_at) == 1:
            value = args[self.path_at[0]]
            attribute = self.paths[0].field
            return (getattr(value, attribute) if attribute else value,)
        found = []
        for arg, index in zip(self.paths, self.path_at, strict=True):
            value = args[index]
            found.append(getattr(value, arg.field) if arg.field else value)
        return tuple(found)

    def kept(self, items: list[Any], scope: str, keep: Keep) -> list[Any]:
        """The results of a listing call (``list_info``...) of directory ``scope`` (normalized)
        for which ``keep(path, kind)`` holds."""
        results = self.results
        if results == "listing":
            return [item for item in items if keep(item[0].path, item[0].kind)]
        if results == "named":
            base = "/" if scope == "/" else scope + "/"
            return [item for item in items if keep(base + item[0], item[1].kind)]
        if results == "entries":
            return [item for item in items if keep(item.path, item.kind)]
        return [item for item in items if keep(item.path, "file")]

    async def kept_stream(
        self, items: AsyncIterator[Any], scope: str, keep: Keep
    ) -> AsyncIterator[Any]:
        """The results of a streaming listing (``list``, ``glob``...) for which ``keep(path,
        kind)`` holds; closes ``items``."""
        try:
            if self.results == "entries":
                async for item in items:
                    if keep(item.path, item.kind):
                        yield item
            else:
                async for item in items:
                    if keep(item.path, "file"):
                        yield item
        finally:
            await aclose(items)


def _caller(name: str, params: tuple[inspect.Parameter, ...]) -> Callable[..., Any]:
    """``call(tree, args)``: ``tree.<name>(...)`` with ``args`` in signature order."""
    pieces = []
    for index, param in enumerate(params):
        if param.kind is inspect.Parameter.KEYWORD_ONLY:
            pieces.append(f"{param.name}=a[{index}]")
        else:
            pieces.append(f"a[{index}]")
    source = f"def call(tree, a):\n    return tree.{name}({', '.join(pieces)})\n"
    return _compiled(source, "call", {})


def _forwarder(verb: Verb, params: tuple[inspect.Parameter, ...]) -> Callable[..., Any]:
    """The method forwarding ``verb`` with the protocol's exact signature."""
    if verb.shape == "value":
        name = verb.name
        return property(lambda self: getattr(self._inner, name))  # type: ignore[return-value]
    defaults = {param.name: param.default for param in params}
    signature = ["self"]
    starred = False
    for param in params:
        if param.kind is inspect.Parameter.KEYWORD_ONLY and not starred:
            signature.append("*")
            starred = True
        if param.default is inspect.Parameter.empty:
            signature.append(param.name)
        else:
            signature.append(f"{param.name}=_defaults[{param.name!r}]")
    packed = "".join(f"{param.name}, " for param in params)
    if verb.shape == "sync":
        body = f"return self._inner.{verb.name}({packed})"
    elif verb.shape == "stream":
        body = f"return self._around_stream(_verb, ({packed}))"
    else:
        body = f"return self._around(_verb, ({packed}))"
    source = f"def {verb.name}({', '.join(signature)}):\n    {body}\n"
    method = _compiled(source, verb.name, {"_defaults": defaults, "_verb": verb})
    original = getattr(verb.protocol, verb.name)
    method.__doc__ = original.__doc__
    method.__qualname__ = f"forwarded.{verb.name}"
    return method


def _compiled(source: str, name: str, namespace: dict[str, Any]) -> Callable[..., Any]:
    exec(compile(source, f"<forwarded {name}>", "exec"), namespace)
    function: Callable[..., Any] = namespace[name]
    return function


TREE_VERBS: tuple[Verb, ...] = (
    # The eight verbs.
    Verb("list", FileSystem, "lists", (PathArg("prefix"),), shape="stream", results="entries"),
    Verb("stat", FileSystem, "reads", (PathArg("path", follows=True),)),
    Verb("glob", FileSystem, "lists", (PathArg("dir"),), shape="stream", results="entries"),
    Verb("read", FileSystem, "reads", (PathArg("path", follows=True),)),
    Verb(
        "grep",
        FileSystem,
        "lists",
        (PathArg("query", field="path"),),
        shape="stream",
        results="hits",
    ),
    Verb(
        "write",
        FileSystem,
        "creates",
        (PathArg("path", "write", "file", follows=True, parents=True),),
    ),
    Verb("delete", FileSystem, "changes", (PathArg("path", "remove"),)),
    Verb(
        "search",
        FileSystem,
        "lists",
        (PathArg("query", field="path"),),
        shape="stream",
        results="hits",
    ),
    # The POSIX extension.
    Verb("lstat", PosixFileSystem, "reads", (PathArg("path"),)),
    Verb(
        "open",
        PosixFileSystem,
        "reads",
        (PathArg("path", "look", "file", follows=True),),
        writes_with=("write", "create", "truncate"),
    ),
    Verb("mkdir", PosixFileSystem, "creates", (PathArg("path", "make", "directory"),)),
    Verb("rmdir", PosixFileSystem, "changes", (PathArg("path", "remove", "directory"),)),
    Verb("unlink", PosixFileSystem, "changes", (PathArg("path", "remove"),)),
    Verb(
        "rename", PosixFileSystem, "changes", (PathArg("src", "remove"), PathArg("dst", "remove"))
    ),
    Verb("setattr", PosixFileSystem, "changes", (PathArg("path", "write"),)),
    Verb("symlink", PosixFileSystem, "creates", (PathArg("path", "make", "file"),)),
    Verb("readlink", PosixFileSystem, "reads", (PathArg("path"),)),
    # Optional capabilities.
    Verb(
        "list_info", ListsWithInfo, "lists", (PathArg("prefix"),), results="listing", optional=True
    ),
    Verb(
        "list_info_reusing",
        ListsReusing,
        "lists",
        (PathArg("prefix"),),
        results="named",
        optional=True,
    ),
    Verb("mknod", MakesNodes, "creates", (PathArg("path", "make", "file"),), optional=True),
    Verb("unlink_keeping", UnlinksKeeping, "changes", (PathArg("path", "remove"),), optional=True),
    Verb(
        "link",
        MakesLinks,
        "creates",
        (PathArg("src", "write"), PathArg("dst", "make", "file")),
        optional=True,
    ),
    Verb("read_bytes", ReadsBytes, "reads", (PathArg("path", follows=True),), optional=True),
    # Checkpoints: of the whole tree, so no path (an audit records them at "/").
    Verb("checkpoint", Checkpoints, "changes", optional=True),
    Verb("checkpoints", Checkpoints, "reads", optional=True),
    Verb("checkpoint_changes", Checkpoints, "reads", optional=True),
    Verb("checkpoint_diff", Checkpoints, "reads", optional=True),
    Verb("rewind", Checkpoints, "changes", optional=True),
    Verb("rewind_replaces", Checkpoints, "reads", optional=True),
    Verb("on_rewind", Checkpoints, "reads", shape="sync", optional=True),
    Verb("fork", Checkpoints, "reads", optional=True),
    Verb("prune_checkpoints", Checkpoints, "changes", optional=True),
    Verb("watch", Watchable, "reads", shape="sync", optional=True),
    Verb("buffers_writes", BuffersWrites, "reads", shape="value", optional=True),
)
"""Every method of a tree (see the module docstring)."""

FILE_VERBS: tuple[Verb, ...] = (
    Verb("read", OpenFile, "reads"),
    Verb("write", OpenFile, "changes"),
    Verb("truncate", OpenFile, "changes"),
    Verb("flush", OpenFile, "syncs"),
    Verb("fsync", OpenFile, "syncs"),
    Verb("close", OpenFile, "closes"),
    Verb("stat", StatsOpenFile, "reads", optional=True),
)
"""Every method of an open file."""

_BY_FUNCTION = {
    getattr(verb.protocol, verb.name): verb
    for verb in TREE_VERBS + FILE_VERBS
    if verb.shape != "value"
}


def forward(method: F) -> F:
    """The forwarder of the contract's verb ``method`` (a protocol's function), for a class
    body: ``lstat = forward(PosixFileSystem.lstat)`` has exactly the protocol's type."""
    verb = _BY_FUNCTION[method]
    if verb.optional:
        raise TypeError(f"{verb.name} is optional: it is forwarded where the inner tree has it")
    return verb.forwarder  # type: ignore[return-value]


def capabilities(table: tuple[Verb, ...], inner: object) -> tuple[Verb, ...]:
    """The optional verbs of ``table`` that ``inner`` has."""
    return _present(tuple(verb for verb in table if verb.optional), inner)


def _present(optional: tuple[Verb, ...], inner: object) -> tuple[Verb, ...]:
    found = []
    for verb in optional:
        if verb.shape == "value":
            if hasattr(inner, verb.name):
                found.append(verb)
        elif getattr(inner, verb.name, None) is not None:
            found.append(verb)
    return tuple(found)


_CLASSES: dict[tuple[type, tuple[tuple[str, Any], ...]], type] = {}
_PLAIN: dict[type, type] = {}  # a class made by _extended -> the class it extends


def _extended(cls: type, methods: tuple[tuple[str, Any], ...]) -> type:
    """``cls`` with ``methods`` (name, function) after its own definitions (made once)."""
    cls = _PLAIN.get(cls, cls)
    if not methods:
        return cls
    key = (cls, methods)
    made = _CLASSES.get(key)
    if made is None:
        mixin = type("Offered", (), {"__slots__": (), **dict(methods)})
        made = type(cls.__name__, (cls, mixin), {"__slots__": (), "__module__": cls.__module__})
        made.__qualname__ = f"{cls.__qualname__}[{'+'.join(name for name, _ in methods)}]"
        _CLASSES[key] = made
        _PLAIN[made] = cls
    return made


def offer(instance: object, methods: Mapping[str, Callable[..., Any]]) -> None:
    """Give ``instance`` (of a class with ``__slots__``) the optional ``methods``, by name: a
    composer's own implementation of a capability, offered where its parts have it (the
    instance's class is switched once, as for the forwarders; its own definitions win)."""
    target = _extended(type(instance), tuple(methods.items()))
    if target is not type(instance):
        instance.__class__ = target


class _Forwarding:
    __slots__ = ()
    _optional: ClassVar[tuple[Verb, ...]] = ()  # the optional verbs of the class's table

    def _adopt(self, inner: object) -> None:
        """Switch to the class with ``inner``'s capabilities (see the module docstring)."""
        present = _present(self._optional, inner)
        target = _extended(type(self), tuple((verb.name, verb.forwarder) for verb in present))
        if target is not type(self):
            self.__class__ = target


class ForwardingTree(_Forwarding):
    """A tree that forwards every verb to ``_inner`` through :meth:`_around` and
    :meth:`_around_stream` (see the module docstring)."""

    __slots__ = ("_inner",)
    _optional: ClassVar[tuple[Verb, ...]] = tuple(verb for verb in TREE_VERBS if verb.optional)
    _inner: PosixFileSystem

    def _forward_to(self, inner: PosixFileSystem) -> None:
        """Forward to ``inner`` from now on, with the capabilities it has."""
        self._inner = inner
        self._adopt(inner)

    def _around(self, verb: Verb, args: tuple[Any, ...]) -> Awaitable[Any]:
        """Every call of a verb that returns an awaitable; forwards it."""
        return verb.call(self._inner, args)  # type: ignore[no-any-return]

    def _around_stream(self, verb: Verb, args: tuple[Any, ...]) -> AsyncIterator[Any]:
        """Every call of a verb that returns an async iterator; forwards it."""
        return verb.call(self._inner, args)  # type: ignore[no-any-return]

    list = forward(FileSystem.list)
    stat = forward(FileSystem.stat)
    glob = forward(FileSystem.glob)
    read = forward(FileSystem.read)
    grep = forward(FileSystem.grep)
    write = forward(FileSystem.write)
    delete = forward(FileSystem.delete)
    search = forward(FileSystem.search)
    lstat = forward(PosixFileSystem.lstat)
    open = forward(PosixFileSystem.open)
    mkdir = forward(PosixFileSystem.mkdir)
    rmdir = forward(PosixFileSystem.rmdir)
    unlink = forward(PosixFileSystem.unlink)
    rename = forward(PosixFileSystem.rename)
    setattr = forward(PosixFileSystem.setattr)
    symlink = forward(PosixFileSystem.symlink)
    readlink = forward(PosixFileSystem.readlink)


class ForwardingFile(_Forwarding):
    """An open file that forwards every verb to ``_inner`` through :meth:`_around`."""

    __slots__ = ("_inner",)
    _optional: ClassVar[tuple[Verb, ...]] = tuple(verb for verb in FILE_VERBS if verb.optional)
    _inner: OpenFile

    def _forward_to(self, inner: OpenFile) -> None:
        """Forward to ``inner`` from now on, with the capabilities it has."""
        self._inner = inner
        self._adopt(inner)

    def _around(self, verb: Verb, args: tuple[Any, ...]) -> Awaitable[Any]:
        """Every call; forwards it."""
        return verb.call(self._inner, args)  # type: ignore[no-any-return]

    read = forward(OpenFile.read)
    write = forward(OpenFile.write)
    truncate = forward(OpenFile.truncate)
    flush = forward(OpenFile.flush)
    fsync = forward(OpenFile.fsync)
    close = forward(OpenFile.close)
