"""Fixture data for the mount suites: a sample tree, its snapshot, a real source tarball.

Theory of operation
-------------------
``SAMPLE`` is a small tree with every kind of entry a mount must show (text, binary, a file larger
than one 128 KiB FUSE read, empty file, modes 0600/0644/0750/0755, fixed nanosecond mtimes, deep
nesting, symlinks to a file, to a directory and to nothing, an empty directory). It is written
with plain ``os`` calls, either into a host directory before a mount serves it (read-only roots)
or through a mount (writable roots), and read back with :func:`snapshot`, which records what
``lstat``/``read``/``readlink`` answer so two trees compare with ``==``.

``SOURCE_PACKAGES`` names real stdlib packages whose files make the "real source tree" for
``tar x`` / ``diff -r``, ``rg`` and ``find``; ``__pycache__`` is left out because the running
interpreter may rewrite it.
"""

from __future__ import annotations

import json
import os
import random
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class File:
    data: bytes
    mode: int = 0o644


@dataclass(frozen=True)
class Dir:
    mode: int = 0o755


@dataclass(frozen=True)
class Link:
    target: str


Entry = File | Dir | Link

BASE_MTIME_NS = 1_600_000_000_123_456_789
BIG = random.Random(7).randbytes(300_000)

SAMPLE: dict[str, Entry] = {
    "README.md": File(b"# sample\nhello world\n"),
    "empty.txt": File(b""),
    "exec.sh": File(b"#!/bin/sh\necho hi\n", 0o755),
    "private.txt": File(b"secret\n", 0o600),
    "src": Dir(),
    "src/a.py": File(b"def alpha():\n    return 'needle'\n"),
    "src/b.py": File(b"import a\n\nNEEDLE = 'needle'  # second match\n"),
    "src/pkg": Dir(),
    "src/pkg/__init__.py": File(b""),
    "src/pkg/mod.py": File(b"VALUE = 42\n"),
    "data": Dir(0o750),
    "data/bytes.bin": File(bytes(range(256)) * 64),
    "data/big.bin": File(BIG),
    "deep": Dir(),
    "deep/a": Dir(),
    "deep/a/b": Dir(),
    "deep/a/b/c": Dir(),
    "deep/a/b/c/leaf.txt": File(b"leaf\n"),
    "empty_dir": Dir(),
    "link_file": Link("README.md"),
    "link_dir": Link("src"),
    "dangling": Link("does-not-exist"),
}


def mtime_ns_of(rel: str) -> int:
    """The fixed mtime every sample entry gets (distinct per entry, odd nanoseconds)."""
    return BASE_MTIME_NS + 1_000_003 * sorted(SAMPLE).index(rel)


def write_tree(root: Path, spec: dict[str, Entry] = SAMPLE) -> None:
    """Create ``spec`` under ``root`` (which exists), with modes and mtimes."""
    for rel in sorted(spec):
        entry, path = spec[rel], root / rel
        if isinstance(entry, Dir):
            path.mkdir()
        elif isinstance(entry, File):
            path.write_bytes(entry.data)
            path.chmod(entry.mode)
        else:
            path.symlink_to(entry.target)
    # Deepest first, so setting a child's attributes does not move its parent's mtime afterwards.
    for rel in sorted(spec, key=lambda r: (-r.count("/"), r)):
        entry, path = spec[rel], root / rel
        if isinstance(entry, Link):
            continue
        if isinstance(entry, Dir):
            path.chmod(entry.mode)
        ns = mtime_ns_of(rel)
        os.utime(path, ns=(ns, ns))


@dataclass(frozen=True)
class Seen:
    """What a tree shows for one entry (directory sizes differ between filesystems: omitted)."""

    kind: str
    mode: int
    size: int | None = None
    mtime_ns: int | None = None
    data: bytes | None = None
    target: str | None = None


def snapshot(root: Path, *, mtimes: bool = True) -> dict[str, Seen]:
    """Every entry under ``root`` by relative path, as ``lstat``/``read``/``readlink`` show it."""
    seen: dict[str, Seen] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            st = path.lstat()
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                seen[rel] = Seen("symlink", 0, target=os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                seen[rel] = Seen("directory", mode, mtime_ns=st.st_mtime_ns if mtimes else None)
            else:
                seen[rel] = Seen(
                    "file",
                    mode,
                    st.st_size,
                    st.st_mtime_ns if mtimes else None,
                    path.read_bytes(),
                )
    return seen


def expected_snapshot(spec: dict[str, Entry] = SAMPLE, *, mtimes: bool = True) -> dict[str, Seen]:
    """What :func:`snapshot` must answer for a tree written by :func:`write_tree`."""
    seen: dict[str, Seen] = {}
    for rel, entry in spec.items():
        ns = mtime_ns_of(rel) if mtimes else None
        if isinstance(entry, Link):
            seen[rel] = Seen("symlink", 0, target=entry.target)
        elif isinstance(entry, Dir):
            seen[rel] = Seen("directory", entry.mode, mtime_ns=ns)
        else:
            seen[rel] = Seen("file", entry.mode, len(entry.data), ns, entry.data)
    return seen


SOURCE_PACKAGES = ("json", "email", "asyncio")


def stdlib_dir() -> Path:
    """The directory holding the running interpreter's pure-Python stdlib."""
    return Path(json.__file__).resolve().parent.parent


def make_source_tarball(dest: Path) -> Path:
    """A tarball of ``SOURCE_PACKAGES`` (hundreds of real files), built with ``tar`` itself."""
    tarball = dest / "source.tar"
    subprocess.run(
        [
            "tar",
            "--exclude=__pycache__",
            "-C",
            str(stdlib_dir()),
            "-cf",
            str(tarball),
            *SOURCE_PACKAGES,
        ],
        check=True,
        timeout=60,
    )
    return tarball
