"""The clock every tree stamps times with: the kernel's coarse real-time clock.

Theory of operation
-------------------
Times a tree makes up (a new file's mtime, a write's, ``utime`` to "now") and times the kernel
makes up for a mount (with the writeback cache the kernel stamps writes and ``touch`` itself,
with ``current_time()``) must come from one clock, or a file's mtime runs backwards across
operations: a file created at fine-grained ``time_ns()`` and then touched by the kernel gets a
coarse time up to a tick (4 ms at ``HZ=250``) *earlier*. The kernel's clock for inode times is
the coarse one, ``CLOCK_REALTIME_COARSE`` (``ktime_get_coarse_real_ts64``); tmpfs stamps with it
too, so trees that do as well never run backwards, and agree with tmpfs: times advance by ticks,
and operations within one tick share a time.
"""

from __future__ import annotations

import time

CLOCK_REALTIME_COARSE: int = getattr(time, "CLOCK_REALTIME_COARSE", 5)  # Linux's clock id


def now_ns() -> int:
    """Now, in nanoseconds since the epoch, by the kernel's coarse real-time clock."""
    return time.clock_gettime_ns(CLOCK_REALTIME_COARSE)
