"""Landlock for a command in ``mountd run``: writes only where the sandbox means them to go.

Theory of operation
-------------------
Landlock (Linux 5.13+) lets an unprivileged process take rights away from itself and everything
it starts, by path: here, every file may be read and executed, but written, created, removed,
renamed or truncated only beneath the *write roots* the sandbox names (the tree, ``/tmp``,
``/dev``, the ``--allow`` paths). It is the layer under the bind layout: a mistake there (a host
directory bound writable by accident) still cannot be written. On kernels with Landlock ABI 6 the
command also may not connect to abstract unix sockets or signal processes outside its own domain
(with ``--net``, the abstract socket namespace is the host's).

Landlock forbids ``mount(2)`` to a process that has restricted itself, so it cannot be applied
before bubblewrap has built the sandbox. This module is therefore also a script that bubblewrap
runs *inside* the sandbox, with the host's ``python3`` (``python3 -I -S landlock.py --write DIR
... -- COMMAND...``): it restricts itself and ``exec``\\ s the command. It uses only the standard
library and the documented system calls (``landlock_create_ruleset``, ``landlock_add_rule``,
``landlock_restrict_self``), so it runs on any host Python from 3.8 on, outside this package.
``mountd run`` reads the kernel's ABI with :func:`abi_version` beforehand and says in its summary
when there is none.

A rule grants rights beneath a directory to everything below it, *across* mount points: when the
tree is the sandbox's ``/`` (the default layout), its write rule covers the system mounts too, so
there Landlock adds the socket and signal scopes, while the read-only binds, the unprivileged uid
and seccomp keep the system directories. With ``--at DIR`` the write roots are exactly ``DIR``,
``/tmp``, ``/dev`` and the ``--allow`` paths.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys

# System call numbers: the same on every architecture (they were added after the tables merged).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

_EXECUTE = 1 << 0
_WRITE_FILE = 1 << 1
_READ_FILE = 1 << 2
_READ_DIR = 1 << 3
READ_RIGHTS = _EXECUTE | _READ_FILE | _READ_DIR
# Every right a file system access can need, by the ABI that introduced it.
_RIGHTS_BY_ABI = (
    (1, (1 << 13) - 1),  # execute, write, read, read dir, remove dir/file, make char/dir/reg/...
    (2, 1 << 13),  # REFER: link or rename into another directory
    (3, 1 << 14),  # TRUNCATE
    (5, 1 << 15),  # IOCTL_DEV: ioctl on device files
)
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
_SCOPE_SIGNAL = 1 << 1
# The first ABI with scopes (Linux 6.12): below it nothing keeps a command with --net off the
# host's abstract unix sockets, and mountd run's summary says so.
SCOPE_ABI = 6


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """The kernel's Landlock ABI (0: none, or disabled at boot)."""
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(
        ctypes.c_long(_CREATE_RULESET),
        None,
        ctypes.c_size_t(0),
        ctypes.c_uint32(_CREATE_RULESET_VERSION),
    )
    return max(0, int(version))


def fs_rights(abi: int) -> int:
    """Every file system right the ``abi`` knows."""
    rights = 0
    for since, bits in _RIGHTS_BY_ABI:
        if abi >= since:
            rights |= bits
    return rights


def restrict(write_roots: list[str], abi: int) -> None:
    """Restrict this process: read and execute everywhere, change only beneath ``write_roots``
    (those that exist); with ABI 6, no abstract sockets or signals outside the domain.
    Raises ``OSError`` if the kernel refuses."""
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    handled = fs_rights(abi)
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= SCOPE_ABI else 0
    if abi >= SCOPE_ABI:
        attr = struct.pack("=QQQ", handled, 0, scoped)
    elif abi >= 4:
        attr = struct.pack("=QQ", handled, 0)
    else:
        attr = struct.pack("=Q", handled)
    buffer = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _check(libc, libc.syscall(_CREATE_RULESET, buffer, ctypes.c_size_t(len(attr)), 0))
    try:
        _allow(libc, ruleset, "/", READ_RIGHTS & handled)
        for root in write_roots:
            _allow(libc, ruleset, root, handled)
        _check(libc, libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
        _check(libc, libc.syscall(_RESTRICT_SELF, ruleset, 0))
    finally:
        os.close(ruleset)


def _allow(libc: ctypes.CDLL, ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if not os.path.isdir(path):
            # A file's rule can only hold the rights that apply to a file.
            rights &= _EXECUTE | _WRITE_FILE | _READ_FILE | (1 << 14) | (1 << 15)
        rule = struct.pack("=Qi", rights, fd)
        buffer = ctypes.create_string_buffer(rule, len(rule))
        _check(libc, libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, buffer, 0))
    finally:
        os.close(fd)


def _check(libc: ctypes.CDLL, result: int) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def main(argv: list[str]) -> int:
    """``landlock.py --abi N [--write DIR]... -- COMMAND...``: restrict, then exec COMMAND."""
    try:
        split = argv.index("--")
    except ValueError:
        print("landlock.py: usage: --abi N [--write DIR]... -- COMMAND...", file=sys.stderr)
        return 2
    options, command = argv[:split], argv[split + 1 :]
    abi = 0
    roots: list[str] = []
    for i in range(0, len(options) - 1, 2):
        if options[i] == "--abi":
            abi = int(options[i + 1])
        elif options[i] == "--write":
            roots.append(options[i + 1])
    if not command:
        print("landlock.py: no command", file=sys.stderr)
        return 2
    try:
        restrict(roots, abi)
    except OSError as error:
        print(f"mountd run: cannot apply the Landlock rules: {error.strerror}", file=sys.stderr)
        return 126
    try:
        os.execvp(command[0], command)
    except FileNotFoundError:
        print(f"mountd run: {command[0]}: command not found", file=sys.stderr)
        return 127
    except OSError as error:
        print(f"mountd run: {command[0]}: {error.strerror}", file=sys.stderr)
        return 126


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
