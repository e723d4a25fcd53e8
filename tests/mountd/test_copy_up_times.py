"""A copy-up changes nothing a directory shows but its ctime, and the mount learns that at once.

Writing to a lower file copies it into the upper by a rename into the upper's directory, which
the host file system records as a change of that directory. On a real file system writing a
file leaves its directory alone, and ``tar`` checks that a directory's ctime did not move while
it read it: a mount that kept the old attributes cached and showed the new ones later made tar
say "file changed as we read it" over a tree nothing changed.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import pytest

from . import compositions
from .mounting import mount_process


@pytest.mark.mount
@pytest.mark.parametrize("kind", ["cow", "cow-durable"])
def test_tar_after_a_copy_up_sees_no_directory_change(tmp_path: Path, kind: str) -> None:
    lower = tmp_path / "lower"
    (lower / "src" / "deep").mkdir(parents=True)
    for index in range(20):
        (lower / "src" / f"f{index}").write_text(f"{index}\n")
        (lower / "src" / "deep" / f"g{index}").write_text(f"{index}\n")
    (tmp_path / "mnt").mkdir()
    if kind == "cow":
        build = functools.partial(compositions.cow, lower)
    else:
        (tmp_path / "upper").mkdir()
        build = functools.partial(compositions.cow_durable, lower, tmp_path / "upper")
    with mount_process(build, tmp_path / "mnt") as mounted:
        src = mounted.path / "src"
        before = {d: os.stat(d) for d in (src, src / "deep")}  # cached by the kernel now
        with open(src / "f1", "a") as handle:
            handle.write("more\n")
        with open(src / "deep" / "g2", "a") as handle:
            handle.write("more\n")
        packed = subprocess.run(
            ["tar", "-cf", "/dev/null", "-C", str(mounted.path), "src"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert (packed.returncode, packed.stderr) == (0, "")
        for directory, stat in before.items():
            # What the directory shows is the lower's still, apart from the ctime.
            assert os.stat(directory).st_mtime_ns == stat.st_mtime_ns
        assert (src / "f1").read_text() == "1\nmore\n"
    assert (lower / "src" / "f1").read_text() == "1\n"
