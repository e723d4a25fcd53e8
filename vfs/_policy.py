"""``policy_fs``: path rules (gitignore patterns) granting ``write``, ``read`` or ``none``.

Theory of operation
-------------------
A :class:`Policy` is a list of :class:`Rule` values, each a gitignore-style pattern (the
``pathspec`` package's ``GitIgnoreSpec`` semantics, matched against the path relative to the tree's
root: ``/x`` is anchored at the root, ``x`` matches at any depth, ``x/`` matches a directory and
everything beneath it, ``**`` spans directories) and an access level. As in ``.gitignore``, the
*last* matching rule wins; a path no rule matches gets the policy's ``default``. ``!`` patterns
are refused: the access level says what a negation would. Also as in ``.gitignore``, a directory
that is ``none`` hides everything beneath it, whatever the rules say about its contents. The root
itself is never hidden (its listing shows the visible children).

``policy_fs(tree, policy)`` enforces it on every call, *before* the call reaches the tree, so
the check holds for paths that do not exist yet (a create) exactly as for existing ones:

- ``none``: any access raises :class:`PolicyDeniedError` (``EACCES``), whether or not something
  exists there (so the error does not tell), and ``list``/``glob``/``grep``/``search`` leave such
  paths out. A mount answers ``EACCES`` to the lookup.
- ``read``: everything that would change the path is refused with :class:`PolicyDeniedError`:
  ``write``, ``delete``, ``open`` for writing/creating/truncating, ``mkdir``, ``rmdir``,
  ``unlink``, ``symlink``, ``mknod``, ``setattr`` (times too), ``link`` (both names: the new one
  writes the same file as the old), and ``rename`` to or from it. Renaming a directory moves
  everything beneath it, so it also needs ``write`` on every entry beneath, at its old and its
  new path (``mv .git x`` cannot carry ``.git/hooks`` out of the protected zone). ``write``'s
  implicit parent directories need ``write`` where they do not exist yet.
- ``write``: the call goes through unchanged.

The checks are one hook around every verb of :mod:`vfs._forward`'s table, made from what the
verb's row says it does at each of its paths: a look needs the path to be visible; making a name
needs ``write`` there for what it makes (a file or a directory); writing or removing an entry
needs ``write`` for what the entry is (looked up where the rules tell files from directories).
``rename`` has its own rule (above); listings leave out what is hidden. So a verb the table
gains is checked by the rules its row states, and the policy tree has exactly the capabilities
of the tree it wraps (``link``, ``list_info_reusing``...).

Checks use the path the tree will really touch: symlinks in the path are resolved through the
tree (chroot semantics, as every tree resolves them), the final one only for calls that follow it
(``stat``, ``read``, ``write``, ``open``, the walks' starting directory). So a link planted at
``/x -> /.git/hooks`` does not open a way around the rules through the API. Through a mount the
kernel resolves links itself, so the paths arriving here are already real; directories known to be
real (no symlink) are remembered to keep that resolution free for the mount's calls, and forgotten
when the tree reports an entry change at one of them (a tree that does not report changes is
resolved in full every time). The check and the call are two steps: a concurrent rename that
swaps a directory for a symlink between them is not caught (the kernel's own path walk is).

A denial is logged on the ``vfs.policy`` logger (warning) and raised; recording it in an audit
trail is :func:`vfs._audit.audited_fs`'s job (wrap the policy tree: it sees the denial as it
passes). Handles are not checked again after ``open``, as POSIX checks permissions at open time.

:func:`repository_policy` is the policy for a git working tree: everything writable, so git works
in full (lock files, objects, the index, refs, logs, packed-refs, ``COMMIT_EDITMSG``,
``ORIG_HEAD``), except the places that make git *run* something or change where it reads from:
``.git/hooks/``, ``.git/config`` and ``.git/config.worktree``, and the same inside submodules'
git directories (``.git/modules/**/``), which are ``read``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeAlias, cast

from ._errors import PathError, PermissionDeniedError
from ._forward import ForwardingTree, Verb
from ._match import compile_grep
from ._merge import aclose
from ._paths import ROOT, is_under, normalize_path, parent_path
from ._posix_view import posix_view
from ._pushdown import refilled
from ._resolve import drive, resolution
from ._types import Change, FileSystem, Kind, Watchable

log = logging.getLogger("vfs.policy")

Access: TypeAlias = Literal["none", "read", "write"]
ACCESS_LEVELS: tuple[Access, ...] = ("none", "read", "write")

_CACHE_SIZE = 65536


class PolicyDeniedError(PermissionDeniedError):
    """A path policy refuses this access (``EACCES``; a :class:`PermissionError`).

    ``operation`` names the refused call (``write``, ``rename``, ...), ``access`` what the policy
    grants at ``path`` (``read`` or ``none``).
    """

    def __init__(self, path: str, *, operation: str = "", access: Access = "none") -> None:
        self.operation = operation
        self.access = access
        super().__init__(path)

    def _message(self) -> str:
        return f"permission denied by policy: {self.path}"


@dataclass(frozen=True)
class Rule:
    """``pattern`` (gitignore syntax, relative to the tree's root) grants ``access``."""

    pattern: str
    access: Access

    def __post_init__(self) -> None:
        if self.access not in ACCESS_LEVELS:
            raise ValueError(
                f"access must be one of {', '.join(ACCESS_LEVELS)}, not {self.access!r}"
            )
        text = self.pattern.strip()
        if not text or text.startswith("#"):
            raise ValueError(f"empty pattern (or a comment): {self.pattern!r}")
        if text.startswith("!"):
            raise ValueError(
                f"negated pattern {self.pattern!r}: give the path its own rule with the access "
                "it should have instead (the last matching rule wins)"
            )


RuleLike: TypeAlias = "Rule | tuple[str, str]"


@dataclass(frozen=True)
class Policy:
    """Rules in order (the last match wins) and the access of paths no rule matches."""

    rules: tuple[Rule, ...] = ()
    default: Access = "write"
    _compiled: tuple[tuple[re.Pattern[str], Access], ...] = field(
        init=False, repr=False, compare=False, default=()
    )

    def __post_init__(self) -> None:
        if self.default not in ACCESS_LEVELS:
            raise ValueError(
                f"default must be one of {', '.join(ACCESS_LEVELS)}, not {self.default!r}"
            )
        import pathspec  # (here: a process that makes no policy does not pay for its import)

        compiled = []
        for rule in self.rules:
            spec = pathspec.GitIgnoreSpec.from_lines([rule.pattern])
            regex = spec.patterns[0].regex
            if regex is None:  # pragma: no cover - blank patterns are refused by Rule
                raise ValueError(f"pattern matches nothing: {rule.pattern!r}")
            compiled.append((regex, rule.access))
        object.__setattr__(self, "_compiled", tuple(compiled))

    @property
    def restricts(self) -> bool:
        """Whether any path can get less than ``write``."""
        return self.default != "write" or any(rule.access != "write" for rule in self.rules)

    def own_access(self, path: str, *, directory: bool = False) -> Access:
        """What the rules say about ``path`` itself (a normalized path), ignoring its parents."""
        if path == ROOT:
            return "read" if self.default == "none" else self.default
        relative = path[1:] + "/" if directory else path[1:]
        for regex, access in reversed(self._compiled):
            if regex.match(relative) is not None:
                return access
        return self.default

    def access(self, path: str, *, directory: bool = False) -> Access:
        """The access granted at ``path``: its own rules, unless a parent directory is ``none``."""
        path = normalize_path(path)
        probe = path
        while probe != ROOT:
            probe = parent_path(probe)
            if probe != ROOT and self.own_access(probe, directory=True) == "none":
                return "none"
        return self.own_access(path, directory=directory)


def as_policy(
    rules: Policy | Mapping[str, str] | Iterable[RuleLike], default: Access = "write"
) -> Policy:
    """A :class:`Policy` from a policy, a ``{pattern: access}`` mapping or ``(pattern, access)``
    pairs / :class:`Rule` values."""
    if isinstance(rules, Policy):
        return rules
    pairs: Iterable[RuleLike] = rules.items() if isinstance(rules, Mapping) else rules
    checked = []
    for item in pairs:
        if isinstance(item, Rule):
            checked.append(item)
        else:
            pattern, access = item
            checked.append(Rule(pattern, cast(Access, access)))
    return Policy(tuple(checked), default)


REPOSITORY_RULES: tuple[Rule, ...] = (
    Rule("/.git/hooks/", "read"),
    Rule("/.git/config", "read"),
    Rule("/.git/config.worktree", "read"),
    Rule("/.git/modules/**/hooks/", "read"),
    Rule("/.git/modules/**/config", "read"),
    Rule("/.git/modules/**/config.worktree", "read"),
)


def repository_policy(*extra: RuleLike, default: Access = "write") -> Policy:
    """The policy for a git working tree at the root (see the module docstring); ``extra``
    rules come after the repository's, so they win where they match."""
    more = as_policy(list(extra)).rules
    return Policy(REPOSITORY_RULES + more, default)


def policy_fs(
    tree: FileSystem,
    rules: Policy | Mapping[str, str] | Iterable[RuleLike],
    *,
    default: Access = "write",
) -> PolicyFileSystem:
    """``tree`` with ``rules`` enforced on every call (see the module docstring).

    ``rules`` is a :class:`Policy` (then ``default`` is its own) or rules in order, the last
    match winning. The result implements :class:`FileSystem` and :class:`PosixFileSystem`, and
    every optional capability of ``posix_view(tree)``: :class:`Watchable` (changes are forwarded
    as the tree reports them), hard links, nodes, listings that reuse what a mount knows...
    """
    return PolicyFileSystem(tree, as_policy(rules, default))


class PolicyFileSystem(ForwardingTree):
    """A tree with a path policy enforced (see the module docstring)."""

    __slots__ = ("_access", "_known", "_tree", "policy")

    def __init__(self, tree: FileSystem, policy: Policy) -> None:
        self._tree = tree
        self.policy = policy
        self._access: dict[str, tuple[Access, Access]] = {}
        # Directories known to hold no symlink in their path; None: resolve in full every time.
        self._known: set[str] | None = None
        view = posix_view(tree)
        self._forward_to(view)
        if isinstance(view, Watchable):
            self._known = set()
            view.watch(self._forget)

    def __repr__(self) -> str:
        return f"policy_fs({self._tree!r}, {self.policy!r})"

    @property
    def tree(self) -> FileSystem:
        return self._tree

    # -- deciding ---------------------------------------------------------------------------

    def access(self, path: str, *, directory: bool = False) -> Access:
        """The access the policy grants at ``path`` (no symlink resolution), memoized."""
        return self._grants(path)[directory]

    def _grants(self, path: str) -> tuple[Access, Access]:
        """What ``path`` gets as a file and as a directory."""
        found = self._access.get(path)
        if found is not None:
            return found
        policy = self.policy
        if path == ROOT:
            granted = policy.own_access(ROOT)
            pair = (granted, granted)
        else:
            parent = parent_path(path)
            if parent != ROOT and self._grants(parent)[1] == "none":
                pair = ("none", "none")
            else:
                pair = (policy.own_access(path), policy.own_access(path, directory=True))
        if len(self._access) >= _CACHE_SIZE:
            self._access.clear()
        self._access[path] = pair
        return pair

    def _plainly_visible(self, path: str) -> bool:
        """Whether ``path`` may be seen, decided without I/O (the mount's common case: the
        parent is a known real directory and the path was judged before)."""
        known = self._known
        if not known:
            return False
        parent = path[: path.rfind("/")] or ROOT
        if parent != ROOT and parent not in known:
            return False
        pair = self._access.get(path)
        return pair is not None and "none" not in pair

    def _forget(self, change: Change) -> None:
        known = self._known
        if known and change.kind == "entry" and change.path in known:
            known.clear()  # a real directory moved or went: its descendants' paths changed

    async def _real(self, path: str, *, follow: bool) -> str:
        """``path`` with its symlinks resolved through the tree (the final one if ``follow``), by
        :mod:`vfs._resolve`'s rules, the tree's own; where resolution fails, the real path where
        it stopped with the rest after it (the call itself then reports the problem)."""
        known = self._known
        if path == ROOT:
            return path
        parent = parent_path(path)
        if known is not None and (parent == ROOT or parent in known) and not follow:
            return path  # the mount's common case: costs nothing
        steps = resolution(path, follow=follow)
        return (await drive(steps, self._kind, self._target)).path

    async def _kind(self, real: str) -> Kind:
        """The kind at the real path ``real``, for the resolver; real directories are
        remembered (they hold no symlink in their path) until a change forgets them."""
        known = self._known
        if known is not None and real in known:
            return "directory"
        try:
            kind = (await self._inner.lstat(real)).kind
        except PathError:
            return "missing"  # resolution stops here; the call reports the problem
        if kind == "directory" and known is not None:
            if len(known) >= _CACHE_SIZE:
                known.clear()
            known.add(real)
        return kind

    async def _target(self, real: str) -> str:
        try:
            return await self._inner.readlink(real)
        except PathError:
            return ""  # (resolution stops here)

    def _deny(self, operation: str, path: str, access: Access) -> PolicyDeniedError:
        log.warning("policy denied %s %s (access %s)", operation, path, access)
        return PolicyDeniedError(path, operation=operation, access=access)

    async def _visible(self, operation: str, path: str, *, follow: bool) -> None:
        """Raise unless ``path`` may be looked at (it is not ``none``)."""
        real = await self._real(path, follow=follow)
        as_file = self.access(real)
        as_dir = self.access(real, directory=True)
        if as_file != "none" and as_dir != "none":
            return
        if as_file == as_dir:
            raise self._deny(operation, real, "none")
        # The rules tell files from directories here: ask what it is.
        info = await self._inner.lstat(real)
        if (as_dir if info.kind == "directory" else as_file) == "none":
            raise self._deny(operation, real, "none")

    def _require_write(self, operation: str, real: str, *, directory: bool) -> None:
        granted = self.access(real, directory=directory)
        if granted != "write":
            raise self._deny(operation, real, granted)

    async def _writable(self, operation: str, path: str, *, follow: bool) -> str:
        """Raise unless the entry at ``path`` (whatever it is) may be changed; its real path."""
        real = await self._real(path, follow=follow)
        as_file = self.access(real)
        as_dir = self.access(real, directory=True)
        if as_file == as_dir:
            if as_file != "write":
                raise self._deny(operation, real, as_file)
            return real
        info = await self._inner.lstat(real)
        self._require_write(operation, real, directory=info.kind == "directory")
        return real

    async def _creatable(self, operation: str, path: str, *, directory: bool, follow: bool) -> str:
        real = await self._real(path, follow=follow)
        self._require_write(operation, real, directory=directory)
        return real

    async def _parents_creatable(self, operation: str, real: str) -> None:
        """``write`` creates missing parents: each one it would create needs ``write``."""
        probe = parent_path(real)
        while probe != ROOT and not (await self._inner.lstat(probe)).exists:
            self._require_write(operation, probe, directory=True)
            probe = parent_path(probe)

    def _shown(self, path: str, kind: str) -> bool:
        return self.access(path, directory=kind == "directory") != "none"

    async def _subtree_writable(self, operation: str, old: str, new: str) -> None:
        """A directory rename moves every entry beneath ``old`` to ``new``: all need ``write``."""
        pending = [old]
        while pending:
            directory = pending.pop()
            for entry in [entry async for entry in self._inner.list(directory)]:
                moved = new + entry.path[len(old) :]
                is_dir = entry.kind == "directory"
                self._require_write(operation, entry.path, directory=is_dir)
                self._require_write(operation, moved, directory=is_dir)
                if is_dir:
                    pending.append(entry.path)

    # -- every verb ---------------------------------------------------------------------

    async def _around(self, verb: Verb, args: tuple[Any, ...]) -> Any:
        if verb.plain_look:
            # lstat, readlink: the mount's common case, often decided without I/O.
            path = normalize_path(args[0])
            if not self._plainly_visible(path):
                await self._visible(verb.name, path, follow=False)
        elif verb.results:
            return await self._listing(verb, args)
        elif verb.name == "rename":
            await self._check_rename(*args)
        else:
            for arg, index in zip(verb.paths, verb.path_at, strict=True):
                # Raise unless the call may do at this path what its row says (see the module).
                path = normalize_path(getattr(args[index], arg.field) if arg.field else args[index])
                access = arg.access
                if access == "look" and verb.writes_with and verb.changes(args):
                    access = "write"  # open for writing
                if access == "look":
                    await self._visible(verb.name, path, follow=arg.follows)
                elif arg.entry == "any":
                    await self._writable(verb.name, path, follow=arg.follows)
                else:
                    directory = arg.entry == "directory"
                    real = await self._creatable(
                        verb.name, path, directory=directory, follow=arg.follows
                    )
                    if arg.parents:
                        await self._parents_creatable(verb.name, real)
        return await verb.call(self._inner, args)

    async def _check_rename(self, src: str, dst: str, noreplace: bool, exchange: bool) -> None:
        """A rename moves a whole subtree: both names, and everything beneath them, need
        ``write`` (see the module docstring)."""
        src = normalize_path(src)
        dst = normalize_path(dst)
        real_src = await self._real(src, follow=False)
        real_dst = await self._real(dst, follow=False)
        source = await self._inner.lstat(real_src)
        if source.exists:
            is_dir = source.kind == "directory"
            self._require_write("rename", real_src, directory=is_dir)
            self._require_write("rename", real_dst, directory=is_dir)
            if is_dir and self.policy.restricts:
                await self._subtree_writable("rename", real_src, real_dst)
            if exchange:
                target = await self._inner.lstat(real_dst)
                if target.kind == "directory":
                    self._require_write("rename", real_src, directory=True)
                    self._require_write("rename", real_dst, directory=True)
                    if self.policy.restricts:
                        await self._subtree_writable("rename", real_dst, real_src)
                elif target.exists:
                    self._require_write("rename", real_src, directory=False)
        else:
            # Nothing to move: the tree answers ENOENT, unless the path may not even be seen.
            await self._visible("rename", src, follow=False)

    async def _listing(self, verb: Verb, args: tuple[Any, ...]) -> Any:
        """``list_info`` and the like: the listing without what the policy hides."""
        path = normalize_path(verb.path_values(args)[0])
        real = await self._real(path, follow=True)
        if path != ROOT and self.access(real, directory=True) == "none":
            return []
        listing = await verb.call(self._inner, args)
        return verb.kept(listing, path, self._keeper(path, real))

    def _keeper(self, path: str, real: str) -> Callable[[str, str], bool]:
        """Whether to show a result beneath ``path``, which names the real path ``real``."""

        def keep(found: str, kind: str) -> bool:
            return self._shown(_moved(found, path, real), kind)

        return keep

    def _around_stream(self, verb: Verb, args: tuple[Any, ...]) -> AsyncIterator[Any]:
        return self._walk(verb, args)

    async def _walk(self, verb: Verb, args: tuple[Any, ...]) -> AsyncIterator[Any]:
        """``list``, ``glob``, ``grep``, ``search``: the results the policy shows."""
        path = normalize_path(verb.path_values(args)[0])
        real = await self._real(path, follow=True)
        if path != ROOT and self.access(real, directory=True) == "none":
            if verb.name == "grep":  # an invalid pattern still fails here, as on any tree
                query = args[0]
                compile_grep(query.pattern, case_insensitive=query.case_insensitive, path=path)
            return
        keep = self._keeper(path, real)
        stream: AsyncIterator[Any]
        if verb.results == "hits":
            # A query with a cap: pushed down, refilled past the hits left out.
            query = args[0]

            def run(limit: int | None) -> AsyncIterator[Any]:
                capped = replace(query, path=path, max_results=limit)
                found: AsyncIterator[Any] = verb.call(self._inner, (capped,))
                return found

            async def keep_hit(hit: Any) -> bool:
                return keep(hit.path, "file")

            stream = refilled(run, query.max_results, keep_hit)
        else:
            stream = verb.kept_stream(verb.call(self._inner, args), path, keep)
        try:
            async for item in stream:
                yield item
        finally:
            await aclose(stream)


def _moved(path: str, prefix: str, real: str) -> str:
    """``path`` (beneath ``prefix``) seen beneath ``real``, the real path ``prefix`` names."""
    if prefix == real:
        return path
    if not is_under(path, prefix):
        return path
    tail = path[len(prefix) :] if prefix != ROOT else path
    return (real.rstrip("/") + tail) if tail else real
