"""A user's own tree: the eight verbs over a plain dict, and nothing else.

Theory of operation
-------------------
``DictTree`` is what an author outside this project would write: files are a ``dict`` of
normalized path to bytes, directories are implied by the files beneath them (so deleting the last
file of a directory removes it), and ``glob``/``grep`` reuse the generic walkers of ``vfs``. It
implements no POSIX extension, so it exercises :func:`vfs.posix_view` and every composer's
fallback for 8-verb children. It is also the conformance suite's own reference subject: the suite
must pass over it, which keeps the suite honest while the real layers are written.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import vfs
from vfs._content import decode_contents, encode_contents
from vfs._paths import is_strictly_under, join_path, normalize_path, split_path


class DictTree:
    """Eight verbs over ``{path: bytes}``; ``read_only`` refuses writes and deletes."""

    def __init__(self, files: Mapping[str, str | bytes] | None = None, *, read_only: bool = False):
        self.files: dict[str, bytes] = {
            normalize_path(path): encode_contents(data) for path, data in (files or {}).items()
        }
        self.read_only = read_only
        self.reads = 0

    def _kind(self, path: str) -> vfs.Kind:
        if path in self.files:
            return "file"
        if path == "/" or any(is_strictly_under(other, path) for other in self.files):
            return "directory"
        return "missing"

    async def list(self, prefix: str = "/") -> AsyncIterator[vfs.DirEntry]:
        directory = normalize_path(prefix)
        if self._kind(directory) != "directory":
            return
        depth = len(split_path(directory))
        children: dict[str, vfs.Kind] = {}
        for path in self.files:
            if is_strictly_under(path, directory):
                name = split_path(path)[depth]
                child = join_path(directory, name)
                children[child] = "file" if child == path else "directory"
        for path in sorted(children):
            yield vfs.DirEntry(path, children[path])

    async def stat(self, path: str) -> vfs.FileInfo:
        path = normalize_path(path)
        kind = self._kind(path)
        if kind == "file":
            return vfs.FileInfo("file", size=len(self.files[path]))
        return vfs.FileInfo(kind)

    def glob(self, pattern: str, dir: str = "/") -> AsyncIterator[vfs.DirEntry]:
        return vfs.glob_tree(self, pattern, dir)

    async def read(self, path: str) -> str | bytes:
        path = normalize_path(path)
        if path not in self.files:
            raise vfs.FileNotFoundError(path)
        self.reads += 1
        return decode_contents(path, self.files[path])

    def grep(self, query: vfs.GrepQuery) -> AsyncIterator[vfs.GrepResult]:
        return vfs.grep_tree(self, query)

    async def write(self, path: str, contents: str | bytes) -> None:
        path = normalize_path(path)
        if self.read_only:
            raise vfs.ReadOnlyMountError(path)
        self.files[path] = encode_contents(contents)

    async def delete(self, path: str) -> None:
        path = normalize_path(path)
        if self.read_only:
            raise vfs.ReadOnlyMountError(path)
        if path not in self.files:
            raise vfs.FileNotFoundError(path)
        del self.files[path]

    async def search(self, query: vfs.SearchQuery) -> AsyncIterator[vfs.SearchResult]:
        normalize_path(query.path)
        for _ in ():
            yield _
