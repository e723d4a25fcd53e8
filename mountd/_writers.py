"""Which inodes of a mount processes hold open for writing, read from ``/proc``.

A mount that serves files by inode (``mountd._ops``) is not told when a file is opened or closed,
so ``mountd apply`` asks the kernel instead. Each descriptor's ``/proc/<pid>/fdinfo/<fd>`` names
its mount (``mnt_id``), its inode (``ino``: for a FUSE file, the number ``stat`` showed when the
kernel made the inode: the node id, or the number the mount shows for it, see
``mountd._inodes``) and its open flags. Mount ids belong to a mount namespace (a sandbox sees the mount under an id of its
own), so each namespace's ids for this mount are read from its ``mountinfo`` by the mount's
device number. Nothing here touches the mount itself; processes the daemon may not inspect (other
users', without root) are not seen.
"""

from __future__ import annotations

import os
from pathlib import Path

from vfs.lowlevel import parse_mountinfo


def inodes_open_for_writing(device: str) -> set[int]:
    """The inode numbers of the files on the mount of ``device`` ("major:minor", as
    ``mountinfo`` lists it) that some process holds open for writing."""
    ids_of_namespace: dict[str, set[int]] = {}
    found: set[int] = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            namespace = os.readlink(f"/proc/{pid}/ns/mnt")
            ids = ids_of_namespace.get(namespace)
            if ids is None:
                entries = parse_mountinfo(Path(f"/proc/{pid}/mountinfo").read_bytes())
                ids = {entry.mount_id for entry in entries if entry.device == device}
                ids_of_namespace[namespace] = ids
            if not ids:
                continue
            fds = os.listdir(f"/proc/{pid}/fdinfo")
        except OSError:  # gone, or not ours to inspect
            continue
        for fd in fds:
            try:
                text = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
            except OSError:
                continue
            fields = dict(line.partition(":")[::2] for line in text.splitlines())
            try:
                writing = int(fields["flags"], 8) & os.O_ACCMODE != os.O_RDONLY
                if writing and int(fields["mnt_id"]) in ids:
                    found.add(int(fields["ino"]))
            except (KeyError, ValueError):  # not a file descriptor of the usual kind
                continue
    return found
