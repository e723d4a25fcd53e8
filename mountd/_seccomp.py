"""The system calls a command in ``mountd run`` may not make: the sandbox's seccomp layer.

Theory of operation
-------------------
:data:`REFUSED` is the whole rule: one row per group of system calls, with the answer the caller
gets and why the group is refused. Everything else is allowed (a deny-list, as bubblewrap's users
Flatpak and sandbox-runtime have it; it covers what Docker's default profile refuses to a process
without capabilities). :func:`compile_filter` turns the table into a BPF program with libseccomp
(through ``pyseccomp``, a binding of the system library, never hand-written BPF) for bubblewrap's
``--seccomp FD``, which loads it as the last step before the command starts, so bubblewrap's own
setup is unaffected and nothing the command starts can drop it.

The filter covers the native architecture and, on x86-64, the 32-bit and x32 system call tables
as well (a 32-bit binary is filtered the same way instead of being killed); a call made through
an architecture the filter does not know kills the thread (libseccomp's default), so no other
table can be used to get around it.

A refused call fails with ``EPERM``, as it would for a process without the privilege, except
where userspace is expected to fall back to something the filter can judge (``ENOSYS``):
``clone3`` (its flags are in memory the filter cannot read; glibc then uses ``clone``, whose
flags it can) and io_uring (whose operations bypass the filter; libuv and others then use plain
system calls).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import platform
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyseccomp as seccomp

# Namespace flags of clone(2): a new namespace of any kind is refused (unshare and setns are too).
_CLONE_NAMESPACES = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)
_TIOCSTI = 0x5412  # push a byte into a terminal's input: typed into the caller's shell
_TIOCLINUX = 0x541C  # the Linux console's own ioctl (among others, it copies and pastes)


@dataclass(frozen=True)
class Refusal:
    """System calls the sandbox refuses, the errno they fail with and why.

    The optional conditions look at argument ``index``: ``equals`` refuses a call whose
    argument (its low 32 bits, as the kernel reads an ``int``) is one of these, ``flags`` one
    that has any of these bits set."""

    calls: tuple[str, ...]
    why: str
    errno: int = errno.EPERM
    index: int = 0
    equals: tuple[int, ...] = ()
    flags: tuple[int, ...] = ()


REFUSED: tuple[Refusal, ...] = (
    Refusal(
        (
            "mount",
            "umount",
            "umount2",
            "pivot_root",
            "chroot",
            "fsopen",
            "fsconfig",
            "fsmount",
            "fspick",
            "move_mount",
            "open_tree",
            "mount_setattr",
        ),
        "changing what is mounted where: the layout is the sandbox",
    ),
    Refusal(
        ("unshare", "setns"),
        "new or other namespaces: a new user namespace hands back every capability inside it, "
        "which is where most kernel escapes start",
    ),
    Refusal(
        ("clone",),
        "clone(2) with a namespace flag (the same as unshare)",
        flags=_CLONE_NAMESPACES,
    ),
    Refusal(
        ("clone3",),
        "its flags lie in memory the filter cannot read: glibc falls back to clone(2)",
        errno=errno.ENOSYS,
    ),
    Refusal(
        ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd"),
        "reading or steering another process's memory",
    ),
    Refusal(
        ("bpf", "perf_event_open", "userfaultfd"),
        "interfaces into the kernel's own execution, the usual first step of a kernel exploit",
    ),
    Refusal(
        ("io_uring_setup", "io_uring_enter", "io_uring_register"),
        "its operations bypass this filter; callers fall back to plain system calls",
        errno=errno.ENOSYS,
    ),
    Refusal(
        ("keyctl", "add_key", "request_key"),
        "the kernel keyrings are not namespaced: they hold the host's secrets",
    ),
    Refusal(
        ("open_by_handle_at", "name_to_handle_at"),
        "opening files by handle walks around every path check (the 'shocker' escape)",
    ),
    Refusal(
        (
            "kexec_load",
            "kexec_file_load",
            "reboot",
            "init_module",
            "finit_module",
            "delete_module",
            "create_module",
            "query_module",
            "get_kernel_syms",
        ),
        "replacing or extending the running kernel",
    ),
    Refusal(
        (
            "acct",
            "swapon",
            "swapoff",
            "quotactl",
            "quotactl_fd",
            "nfsservctl",
            "syslog",
            "lookup_dcookie",
            "uselib",
            "ustat",
            "sysfs",
            "_sysctl",
            "vhangup",
        ),
        "host-wide administration",
    ),
    Refusal(
        ("settimeofday", "clock_settime", "clock_adjtime", "stime"),
        "the host's clock",
    ),
    Refusal(
        ("ioperm", "iopl", "vm86", "vm86old", "modify_ldt"),
        "direct hardware and legacy CPU modes",
    ),
    Refusal(
        ("mbind", "set_mempolicy", "migrate_pages", "move_pages", "get_mempolicy"),
        "the host's memory placement",
    ),
    Refusal(
        ("ioctl",),
        "typing into the caller's terminal (TIOCSTI: the input runs in the caller's shell once "
        "the command ends) or driving the Linux console",
        index=1,
        equals=(_TIOCSTI, _TIOCLINUX),
    ),
)


def refused_calls() -> frozenset[str]:
    """The names of every system call some row refuses (in every or some of its uses)."""
    return frozenset(name for row in REFUSED for name in row.calls)


def filter_program(cache: Path | None) -> bytes:
    """The BPF program for :data:`REFUSED`, compiled once per table and architecture and kept
    in the directory ``cache`` (libseccomp and its binding cost more to load than a run of a
    short command; a program is the same for every run)."""
    if cache is None:
        return compile_filter()
    key = hashlib.sha256(repr((REFUSED, platform.machine())).encode()).hexdigest()[:24]
    path = cache / f"seccomp-{key}.bpf"
    try:
        return path.read_bytes()
    except OSError:
        pass
    program = compile_filter()
    fd, temp = tempfile.mkstemp(dir=cache, prefix=".seccomp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(program)
        os.replace(temp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temp)
    return program


def compile_filter() -> bytes:
    """The BPF program for :data:`REFUSED` on this machine's architectures."""
    import pyseccomp as seccomp

    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    native = seccomp.system_arch()
    if native == seccomp.Arch.X86_64:
        for arch in (seccomp.Arch.X86, seccomp.Arch.X32):
            rules.add_arch(arch)
    for row in REFUSED:
        action = seccomp.ERRNO(row.errno)
        for name in row.calls:
            number = seccomp.resolve_syscall(seccomp.Arch.NATIVE, name)
            if number == -1:  # unknown to this libseccomp: no architecture here has it
                continue
            for args in _conditions(row):
                rules.add_rule(action, name, *args)
    with tempfile.TemporaryFile() as out:
        rules.export_bpf(out)
        out.seek(0)
        return out.read()


def _conditions(row: Refusal) -> list[tuple[seccomp.Arg, ...]]:
    """One tuple of argument comparisons per rule: all of a tuple must hold for it to refuse."""
    import pyseccomp as seccomp

    if row.equals:
        return [(seccomp.Arg(row.index, seccomp.MASKED_EQ, 0xFFFFFFFF, v),) for v in row.equals]
    if row.flags:
        return [(seccomp.Arg(row.index, seccomp.MASKED_EQ, flag, flag),) for flag in row.flags]
    return [()]
