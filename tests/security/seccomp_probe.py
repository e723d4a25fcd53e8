"""Run inside a sandbox by the host's python3: try each refused system call (harmlessly: bad or
empty arguments, pids that do not exist), print one JSON object of name -> errno name ("ok" when
the call succeeded)."""

import contextlib
import ctypes
import errno
import json
import os
import sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
# x86-64 numbers (the probe runs on the host's architecture; the test checks it is x86-64).
NUMBERS = {
    "mount": 165, "umount2": 166, "pivot_root": 155, "unshare": 272, "setns": 308,
    "keyctl": 250, "add_key": 248, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
    "open_by_handle_at": 304, "kexec_load": 246, "init_module": 175, "ptrace": 101,
    "process_vm_readv": 310, "clone3": 435, "io_uring_setup": 425, "fsopen": 430,
    "open_tree": 428, "move_mount": 429, "syslog": 103, "swapon": 167, "reboot": 169,
}  # fmt: skip


def call(name, *args):
    result = libc.syscall(NUMBERS[name], *args)
    if result >= 0:
        if name in ("userfaultfd", "fsopen", "open_tree", "keyctl"):
            with contextlib.suppress(OSError):
                os.close(result)
        return "ok"
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))


def in_child(name, *args):
    """``call`` in a child process, for a call that changes its caller: after a new user
    namespace the caller has no capability in the host's, and kernels that check one before the
    arguments (6.1 does for open_by_handle_at, kexec_load, init_module) would answer EPERM to
    every probe after it, filter or not."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.write(write, call(name, *args).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        result = pipe.read()
    os.waitpid(pid, 0)
    return result


def tiocsti():
    master = os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY)
    libc.grantpt(master)
    libc.unlockpt(master)
    libc.ptsname.restype = ctypes.c_char_p
    slave = os.open(libc.ptsname(master), os.O_RDWR | os.O_NOCTTY)
    byte = ctypes.c_char(b"x")
    result = libc.ioctl(slave, 0x5412, ctypes.byref(byte))
    code = ctypes.get_errno()
    os.close(slave)
    os.close(master)
    return "ok" if result == 0 else errno.errorcode.get(code, str(code))


def clone_newuser():
    # clone(2) with CLONE_NEWUSER | SIGCHLD: the child exits at once.
    result = libc.syscall(56, 0x10000000 | 17, None, None, None, None)
    if result == 0:
        os._exit(0)
    if result > 0:
        os.waitpid(result, 0)
        return "ok"
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))


results = {
    "mount": call("mount", b"none", b"/tmp", b"tmpfs", 0, None),
    "umount2": call("umount2", b"/proc", 2),
    "pivot_root": call("pivot_root", b"/nonexistent", b"/nonexistent"),
    "unshare": in_child("unshare", 0x10000000),
    "setns": call("setns", -1, 0),
    "clone": clone_newuser(),
    "clone3": call("clone3", None, 0),
    "keyctl": call("keyctl", 0, -3, 0),
    "add_key": call("add_key", b"user", b"probe", b"x", 1, -3),
    "bpf": call("bpf", 5, None, 0),
    "perf_event_open": call("perf_event_open", None, 0, -1, -1, 0),
    "userfaultfd": call("userfaultfd", 0),
    "open_by_handle_at": call("open_by_handle_at", -1, None, 0),
    "kexec_load": call("kexec_load", 0, 0, None, 0),
    "init_module": call("init_module", None, 0, b""),
    "ptrace": call("ptrace", 16, 2**22 + 12345, None, None),  # PTRACE_ATTACH, no such pid
    "process_vm_readv": call("process_vm_readv", 2**22 + 12345, None, 0, None, 0, 0),
    "io_uring_setup": call("io_uring_setup", 1, None),
    "fsopen": call("fsopen", b"tmpfs", 0),
    "open_tree": call("open_tree", -100, b"/", 1),
    "move_mount": call("move_mount", -1, b"", -1, b"", 0),
    "syslog": call("syslog", 10, None, 0),
    "swapon": call("swapon", b"/nonexistent", 0),
    "reboot": call("reboot", 0, 0, 0, None),  # bad magic: EINVAL when allowed
    "TIOCSTI": tiocsti(),
}
json.dump(results, sys.stdout)
