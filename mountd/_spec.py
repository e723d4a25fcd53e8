"""Mount specs: a TOML file that describes a ``vfs`` tree, checked whole before anything mounts.

Theory of operation
-------------------
A spec has one required table, ``root``, which is a *layer*. Every layer is a table with a
``type`` and the keys that type takes; ``union`` and ``overlay`` hold further layers, so specs
nest to any depth::

    [root]                       # the tree served at the mountpoint
    type = "union"               # a union of mounts, longest prefix wins

    [root.mounts."/"]
    type = "dir"                 # a host directory
    path = "."                   # relative to this spec file's directory
    read_only = true

    [root.mounts."/tmp"]
    type = "temp"                # in memory, gone when the mount stops
    files = { "/README.md" = "scratch space" }

    [root.mounts."/data"]
    type = "overlay"             # earlier layers win; an overlay is read-only
    layers = [
      { type = "dir", path = "./upper" },
      { type = "dir", path = "./lower", read_only = true },
    ]

Layer types and their keys (``docs/spec.md`` is the user-facing page):

========  ==============================================================================
temp      ``files``: table of absolute path -> text (optional). In memory.
dir       ``path``: host directory (required; ``~`` expands; relative to the spec's
          directory), ``read_only``: boolean (default false), ``policy``: ``"repository"``
          (optional; see ``cow``), ``cross_mounts``: boolean (default false: mounts below
          ``path`` are left out, see ``vfs.dir_fs``).
empty     no keys. No files; writes fail as read-only.
union     ``mounts``: table of mount prefix -> layer (required, at least one). Prefixes are
          absolute and normalized (``"/tmp"``, not ``"/tmp/"`` or ``"tmp"``).
overlay   ``layers``: array of layers, earliest wins (required, at least one).
host      ``files``: table of absolute path -> text (optional), ``scope``: string (default
          ``"default"``).
          ``host_fs`` over an in-process ``InMemoryHostFiles``, for trying host-backed roots.
cow       ``lower``: layer (required), ``upper``: layer (optional; default in memory),
          ``policy``: ``"repository"`` (optional). Copy-on-write over ``lower``
          (``vfs.cow_fs``): writes land in ``upper``, ``lower`` is never written. The
          repository policy (``vfs._policy.repository_policy``) refuses writes to
          ``.git/hooks`` and ``.git/config`` and lets git do everything else.
s3        ``bucket`` (required), ``prefix`` (optional, ``"a/b"``: a key prefix, the scope),
          ``endpoint`` (optional URL; AWS when absent), ``region`` (optional),
          ``metadata_ttl`` (optional seconds, default 1). ``host_fs`` over ``S3HostFiles``;
          credentials come from the environment (``AWS_ACCESS_KEY_ID``, ...), never the spec.
========  ==============================================================================

Loading happens in two steps with a value in between: :func:`parse_spec` turns TOML into a tree
of frozen :data:`Layer` values and checks *everything* (types, unknown keys, prefixes, that each
``dir`` path is an existing directory); only then does :func:`build` call the ``vfs`` helpers. So a
malformed spec fails before any mount exists, and every failure is a :class:`SpecError` naming the
file, the dotted key (``root.mounts."/tmp".type``) and the problem. The embedded default
(:func:`default_layer`) is a value of the same model, so it is described and built the same way.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import vfs
from vfs import cow_fs, normalize_path, policy_fs, repository_policy

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

LAYER_TYPES = ("temp", "dir", "empty", "union", "overlay", "host", "cow", "s3")
POLICIES = ("repository",)


class SpecError(Exception):
    """A spec that cannot be served: ``file``, the dotted ``key`` (``None`` for the whole file)
    and the ``problem``. ``str()`` is ``"spec.toml: root.mounts."/tmp".type: problem"``."""

    def __init__(self, file: str, key: str | None, problem: str) -> None:
        self.file = file
        self.key = key
        self.problem = problem
        where = f"{file}: {key}" if key else file
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class TempLayer:
    files: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class DirLayer:
    path: Path
    read_only: bool = False
    policy: str | None = None
    cross_mounts: bool = False


@dataclass(frozen=True)
class EmptyLayer:
    pass


@dataclass(frozen=True)
class UnionLayer:
    mounts: tuple[tuple[str, Layer], ...]


@dataclass(frozen=True)
class OverlayLayer:
    layers: tuple[Layer, ...]


@dataclass(frozen=True)
class HostLayer:
    files: tuple[tuple[str, str], ...] = ()
    scope: str = "default"


@dataclass(frozen=True)
class CowLayer:
    lower: Layer
    upper: Layer | None = None
    policy: str | None = None


@dataclass(frozen=True)
class S3Layer:
    bucket: str
    prefix: str = ""
    endpoint: str | None = None
    region: str | None = None
    metadata_ttl: float = 1.0


Layer: TypeAlias = (
    "TempLayer | DirLayer | EmptyLayer | UnionLayer | OverlayLayer | HostLayer | CowLayer | S3Layer"
)


@dataclass(frozen=True)
class BuiltTree:
    """What a spec turns into: the tree to serve and a one-line description of it."""

    fs: vfs.FileSystem
    description: str


# --- loading and checking (no vfs calls) -------------------------------------------------------


def load_spec(path: str | os.PathLike[str]) -> Layer:
    """Read and check the spec file at ``path``; relative ``dir`` paths resolve against its
    directory. Raises :class:`SpecError` (also for a file that cannot be read)."""
    name = os.fspath(path)
    try:
        data = Path(name).read_bytes()
    except OSError as error:
        raise SpecError(name, None, f"cannot read spec: {error.strerror or error}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SpecError(name, None, f"not UTF-8 text ({error.reason})") from None
    return parse_spec(text, file=name, base_dir=Path(name).resolve().parent)


def parse_spec(text: str, *, file: str, base_dir: Path) -> Layer:
    """Check a spec given as TOML text and return its root layer. ``file`` only names the spec in
    errors; ``base_dir`` anchors relative ``dir`` paths."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise SpecError(file, None, f"invalid TOML: {error}") from None
    checker = _Checker(file, base_dir)
    checker.keys(document, None, required=("root",), optional=())
    return checker.layer(document["root"], "root")


class _Checker:
    """Walks the parsed TOML, turning tables into layers; the first problem raises."""

    def __init__(self, file: str, base_dir: Path) -> None:
        self.file = file
        self.base_dir = base_dir

    def fail(self, key: str | None, problem: str) -> SpecError:
        return SpecError(self.file, key, problem)

    def keys(
        self,
        table: Mapping[str, Any],
        key: str | None,
        *,
        required: tuple[str, ...],
        optional: tuple[str, ...],
        what: str = "",
    ) -> None:
        allowed = required + optional
        for name in table:
            if name not in allowed:
                hint = _close_matches(name, allowed)
                problem = f"unknown key{what}"
                problem += f' (did you mean "{hint[0]}"?)' if hint else _expected(allowed)
                raise self.fail(_join(key, name), problem)
        for name in required:
            if name not in table:
                raise self.fail(key, f'missing key "{name}"{what}')

    def layer(self, value: Any, key: str) -> Layer:
        if not isinstance(value, dict):
            raise self.fail(
                key, f'expected a layer table like {{ type = "temp" }}, got {_show(value)}'
            )
        if "type" not in value:
            raise self.fail(key, 'missing key "type"' + _expected(LAYER_TYPES))
        kind = value["type"]
        type_key = _join(key, "type")
        if not isinstance(kind, str):
            raise self.fail(type_key, f"expected a string, got {_show(kind)}")
        if kind not in LAYER_TYPES:
            hint = _close_matches(kind, LAYER_TYPES)
            did_you_mean = f'; did you mean "{hint[0]}"?' if hint else ""
            raise self.fail(
                type_key,
                f'unknown layer type "{kind}" (expected one of: {", ".join(LAYER_TYPES)}'
                f"{did_you_mean})",
            )
        what = f' for a "{kind}" layer'
        if kind == "temp":
            self.keys(value, key, required=("type",), optional=("files",), what=what)
            return TempLayer(self.files(value, key))
        if kind == "dir":
            self.keys(
                value,
                key,
                required=("type", "path"),
                optional=("read_only", "policy", "cross_mounts"),
                what=what,
            )
            return DirLayer(
                self.directory(value["path"], _join(key, "path")),
                self.boolean(value, key, "read_only"),
                self.policy(value, key),
                self.boolean(value, key, "cross_mounts"),
            )
        if kind == "cow":
            self.keys(
                value, key, required=("type", "lower"), optional=("upper", "policy"), what=what
            )
            upper = value.get("upper")
            return CowLayer(
                self.layer(value["lower"], _join(key, "lower")),
                None if upper is None else self.layer(upper, _join(key, "upper")),
                self.policy(value, key),
            )
        if kind == "empty":
            self.keys(value, key, required=("type",), optional=(), what=what)
            return EmptyLayer()
        if kind == "union":
            self.keys(value, key, required=("type", "mounts"), optional=(), what=what)
            return UnionLayer(self.mounts(value["mounts"], _join(key, "mounts")))
        if kind == "overlay":
            self.keys(value, key, required=("type", "layers"), optional=(), what=what)
            return OverlayLayer(self.layers(value["layers"], _join(key, "layers")))
        if kind == "s3":
            self.keys(value, key, required=("type", "bucket"), optional=S3_KEYS, what=what)
            return self.s3(value, key)
        self.keys(value, key, required=("type",), optional=("files", "scope"), what=what)
        scope = value.get("scope", "default")
        if not isinstance(scope, str):
            raise self.fail(_join(key, "scope"), f"expected a string, got {_show(scope)}")
        return HostLayer(self.files(value, key), scope)

    def s3(self, table: Mapping[str, Any], key: str) -> S3Layer:
        if importlib.util.find_spec("boto3") is None:
            raise self.fail(
                _join(key, "type"), 'the "s3" layer needs boto3 (pip install "agentroot[s3]")'
            )
        strings = {}
        for name in ("bucket", "prefix", "endpoint", "region"):
            found = table.get(name)
            if found is not None and not isinstance(found, str):
                raise self.fail(_join(key, name), f"expected a string, got {_show(found)}")
            strings[name] = found
        bucket = strings["bucket"]
        assert bucket is not None
        if not _BUCKET.fullmatch(bucket):
            raise self.fail(
                _join(key, "bucket"),
                f"invalid bucket name {_quote(bucket)} (3 to 63 lowercase letters, digits, "
                "dots and hyphens)",
            )
        prefix = strings["prefix"] or ""
        try:
            normal = normalize_path(prefix)[1:]
        except vfs.InvalidPathError as error:
            raise self.fail(
                _join(key, "prefix"), f"invalid prefix {_quote(prefix)}: {error}"
            ) from None
        if prefix != normal:
            raise self.fail(
                _join(key, "prefix"),
                f"invalid prefix {_quote(prefix)} (write it as {_quote(normal)})",
            )
        endpoint = strings["endpoint"]
        if endpoint is not None and not endpoint.startswith(("http://", "https://")):
            raise self.fail(
                _join(key, "endpoint"),
                f'expected a URL like "http://127.0.0.1:8333", got {_show(endpoint)}',
            )
        ttl = table.get("metadata_ttl", 1.0)
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or ttl < 0:
            raise self.fail(
                _join(key, "metadata_ttl"), f"expected seconds (a number >= 0), got {_show(ttl)}"
            )
        return S3Layer(bucket, prefix, endpoint, strings["region"], float(ttl))

    def boolean(self, table: Mapping[str, Any], key: str, name: str) -> bool:
        value = table.get(name, False)
        if not isinstance(value, bool):
            raise self.fail(_join(key, name), f"expected true or false, got {_show(value)}")
        return value

    def policy(self, table: Mapping[str, Any], key: str) -> str | None:
        value = table.get("policy")
        if value is None:
            return None
        policy_key = _join(key, "policy")
        if not isinstance(value, str):
            raise self.fail(policy_key, f"expected a string, got {_show(value)}")
        if value not in POLICIES:
            raise self.fail(
                policy_key, f'unknown policy "{value}" (expected one of: {", ".join(POLICIES)})'
            )
        return value

    def files(self, table: Mapping[str, Any], key: str) -> tuple[tuple[str, str], ...]:
        files = table.get("files", {})
        files_key = _join(key, "files")
        if not isinstance(files, dict):
            raise self.fail(
                files_key,
                f'expected a table of path = text, like {{ "/a.txt" = "hi" }}, got {_show(files)}',
            )
        checked: dict[str, str] = {}
        for path, contents in files.items():
            entry_key = _join(files_key, path)
            normal = self.absolute(path, entry_key, "file path")
            if not isinstance(contents, str):
                raise self.fail(
                    entry_key, f"expected the file's text as a string, got {_show(contents)}"
                )
            if normal in checked:
                raise self.fail(entry_key, f'the same file as "{normal}" given twice')
            checked[normal] = contents
        return tuple(sorted(checked.items()))

    def absolute(self, path: str, key: str, what: str) -> str:
        """A path written in normalized absolute form (``/tmp``), else an error naming the fix."""
        try:
            normal = normalize_path(path)
        except vfs.InvalidPathError as error:
            raise self.fail(key, f'invalid {what} "{path}": {error}') from None
        if path != normal:
            raise self.fail(key, f'invalid {what} "{path}" (write it as "{normal}")')
        return normal

    def directory(self, value: Any, key: str) -> Path:
        if not isinstance(value, str):
            raise self.fail(key, f"expected a directory path as a string, got {_show(value)}")
        if not value:
            raise self.fail(key, 'empty directory path (use "." for the spec file\'s directory)')
        path = Path(os.path.expanduser(value))
        path = Path(os.path.abspath(self.base_dir / path))
        if not path.exists():
            raise self.fail(key, f"directory does not exist: {path}")
        if not path.is_dir():
            raise self.fail(key, f"not a directory: {path}")
        return path

    def mounts(self, value: Any, key: str) -> tuple[tuple[str, Layer], ...]:
        if not isinstance(value, dict):
            raise self.fail(
                key, f'expected a table of prefix = layer, like [{key}."/tmp"], got {_show(value)}'
            )
        if not value:
            raise self.fail(key, "a union needs at least one mount")
        mounts: list[tuple[str, Layer]] = []
        for prefix, layer in value.items():
            mount_key = _join(key, prefix)
            if not prefix.startswith("/"):
                raise self.fail(
                    mount_key,
                    f'invalid mount prefix "{prefix}" (prefixes are absolute, like "/{prefix}")',
                )
            mounts.append(
                (self.absolute(prefix, mount_key, "mount prefix"), self.layer(layer, mount_key))
            )
        return tuple(sorted(mounts, key=lambda item: item[0]))

    def layers(self, value: Any, key: str) -> tuple[Layer, ...]:
        if not isinstance(value, list):
            raise self.fail(key, f"expected an array of layers, got {_show(value)}")
        if not value:
            raise self.fail(key, "an overlay needs at least one layer")
        return tuple(self.layer(item, f"{key}[{index}]") for index, item in enumerate(value))


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
S3_KEYS = ("prefix", "endpoint", "region", "metadata_ttl")


def _join(key: str | None, name: str) -> str:
    """Dotted TOML key path; names that are not bare keys are quoted, as TOML writes them."""
    part = name if _BARE_KEY.fullmatch(name) else _quote(name)
    return part if key is None else f"{key}.{part}"


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(c if c.isprintable() else _escape(c) for c in escaped) + '"'


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _show(value: Any) -> str:
    """A wrong value, named by its TOML type: ``string "yes"``, ``integer 3``, ``a table``."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"string {_quote(value)}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"float {value}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return f"a {type(value).__name__}"


def _expected(names: tuple[str, ...]) -> str:
    return f" (expected one of: {', '.join(names)})" if names else " (this layer takes no keys)"


# --- the embedded default, building and describing ---------------------------------------------


def default_layer(cwd: str | os.PathLike[str], upper: Path | None = None) -> Layer:
    """The tree ``mountd mount MOUNTPOINT`` serves without a spec: :func:`cow_layer` of ``cwd``
    at ``/`` and a writable in-memory ``/tmp``. The cow never writes its lower; the lower is
    writable so that ``mountd apply`` can write the changes back."""
    return UnionLayer((("/", cow_layer(cwd, upper=upper)), ("/tmp", TempLayer())))


def cow_layer(
    cwd: str | os.PathLike[str], *, read_only: bool = False, upper: Path | None = None
) -> CowLayer:
    """``cwd`` under copy-on-write, with the repository policy when ``cwd`` holds a git
    repository (a ``.git`` directory). The changes go to the directory ``upper`` (a session's:
    durable, see :mod:`mountd._sessions`), else to memory. ``mountd run`` serves this; its lower
    is writable so that ``--apply`` (and ``mountd apply``) can write the changes back."""
    path = Path(os.path.abspath(cwd))
    policy = "repository" if (path / ".git").is_dir() else None
    changes = None if upper is None else DirLayer(upper)
    return CowLayer(DirLayer(path, read_only=read_only), changes, policy)


def build(layer: Layer) -> vfs.FileSystem:
    """Call the ``vfs`` helpers for a checked layer tree."""
    if isinstance(layer, TempLayer):
        return vfs.temp_fs(dict(layer.files))
    if isinstance(layer, DirLayer):
        tree = vfs.dir_fs(layer.path, read_only=layer.read_only, cross_mounts=layer.cross_mounts)
        return _with_policy(tree, layer.policy)
    if isinstance(layer, CowLayer):
        upper = None if layer.upper is None else build(layer.upper)
        return _with_policy(cow_fs(build(layer.lower), upper), layer.policy)
    if isinstance(layer, EmptyLayer):
        return vfs.empty_fs()
    if isinstance(layer, UnionLayer):
        return vfs.union_fs({prefix: build(child) for prefix, child in layer.mounts})
    if isinstance(layer, OverlayLayer):
        return vfs.overlay_fs([build(child) for child in layer.layers])
    if isinstance(layer, S3Layer):
        return _build_s3(layer)
    return _build_host(layer)


def _with_policy(tree: vfs.FileSystem, policy: str | None) -> vfs.FileSystem:
    if policy is None:
        return tree
    return policy_fs(tree, repository_policy())


def _build_host(layer: HostLayer) -> vfs.FileSystem:
    return vfs.host_fs(vfs.InMemoryHostFiles(dict(layer.files), scope=layer.scope), layer.scope)


def _build_s3(layer: S3Layer) -> vfs.FileSystem:
    files = vfs.S3HostFiles(
        layer.bucket,
        endpoint_url=layer.endpoint,
        region=layer.region,
        metadata_ttl=layer.metadata_ttl,
    )
    return vfs.host_fs(files, layer.prefix)


def describe(layer: Layer) -> str:
    """One line saying what a layer tree serves, e.g. ``union(/ = dir /src (read-only), /tmp =
    temp)``."""
    if isinstance(layer, TempLayer):
        count = len(layer.files)
        return "temp" + (f" ({count} file{'s' if count != 1 else ''})" if count else "")
    if isinstance(layer, DirLayer):
        return (
            f"dir {layer.path}"
            + (" (read-only)" if layer.read_only else "")
            + (" (crossing mounts)" if layer.cross_mounts else "")
            + (f" with the {layer.policy} policy" if layer.policy else "")
        )
    if isinstance(layer, CowLayer):
        inner = describe(layer.lower)
        if layer.upper is not None:
            inner += f" under {describe(layer.upper)}"
        if layer.policy:
            inner += f"; {layer.policy} policy"
        return f"cow({inner})"
    if isinstance(layer, EmptyLayer):
        return "empty"
    if isinstance(layer, UnionLayer):
        return (
            "union("
            + ", ".join(f"{prefix} = {describe(child)}" for prefix, child in layer.mounts)
            + ")"
        )
    if isinstance(layer, OverlayLayer):
        return "overlay(" + ", ".join(describe(child) for child in layer.layers) + ")"
    if isinstance(layer, S3Layer):
        where = f" at {layer.endpoint}" if layer.endpoint else ""
        return f"s3 {layer.bucket}/{layer.prefix}{where}"
    count = len(layer.files)
    return "host" + (f" ({count} file{'s' if count != 1 else ''})" if count else "")


def build_tree(layer: Layer) -> BuiltTree:
    return BuiltTree(build(layer), describe(layer))


def _close_matches(word: str, choices: Iterable[str]) -> list[str]:
    """The one of ``choices`` closest to a misspelled ``word`` (difflib: imported only for a
    spec with a mistake)."""
    import difflib

    return difflib.get_close_matches(word, choices, n=1)
