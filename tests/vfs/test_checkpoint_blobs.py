"""The bytes of durable checkpoints: a sparse file never passes through memory, many small files
are stored in one batch, and a blob exists only whole."""

from __future__ import annotations

import json
import os
import tracemalloc
from dataclasses import replace
from pathlib import Path

import pytest

import vfs

from .eightverb import run

OFFSET = 256 << 20  # far past any chunk: a hole of 256 MiB, then one byte


def durable(tmp_path: Path) -> vfs.FileSystem:
    (tmp_path / "lower").mkdir()
    (tmp_path / "lower" / "kept.txt").write_text("kept\n")
    (tmp_path / "upper").mkdir()
    lower = vfs.dir_fs(str(tmp_path / "lower"), read_only=True)
    return vfs.cow_fs(lower, vfs.dir_fs(str(tmp_path / "upper")))


def store(tmp_path: Path, kind: str) -> list[Path]:
    return sorted((tmp_path / "upper" / ".agentroot-cow" / kind).iterdir())


def test_a_sparse_file_is_checkpointed_and_restored_with_its_holes(tmp_path: Path) -> None:
    async def body() -> None:
        tree = durable(tmp_path)
        posix = vfs.posix_view(tree)
        file = await posix.open("/sparse", write=True, create=True)
        await file.write(0, b"head")
        await file.write(OFFSET, b"!")
        await file.close()
        tracemalloc.start()
        try:
            await tree.checkpoint()  # 1: the sparse file
            await tree.write("/sparse", "small now\n")
            await tree.checkpoint()  # 2
            await tree.rewind(1)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 64 << 20, peak
        handle = await posix.open("/sparse")
        try:
            assert await handle.read(0, 8) == b"head" + bytes(4)
            assert await handle.read(OFFSET - 2, 8) == b"\0\0!"
            assert (await handle.stat()).size == OFFSET + 1
        finally:
            await handle.close()
        restored = os.stat(tmp_path / "upper" / "sparse")
        assert restored.st_size == OFFSET + 1
        assert restored.st_blocks * 512 <= 4 << 20  # two chunks at most, not 256 MiB
        large = [blob for blob in store(tmp_path, "blobs") if blob.stat().st_size == OFFSET + 1]
        assert len(large) == 1 and large[0].stat().st_blocks * 512 <= 4 << 20
        diff = await tree.checkpoint_diff(1, 2)
        assert "diff --git a/sparse b/sparse" in diff

    run("trio", body)


def test_small_files_are_stored_once_per_content_in_one_pack(tmp_path: Path) -> None:
    async def body() -> None:
        tree = durable(tmp_path)
        for n in range(50):
            await tree.write(f"/d{n % 5}/f{n}", f"same {n % 10}\n")
        await tree.checkpoint()
        (pack,) = store(tmp_path, "packs")
        lines = pack.read_bytes().splitlines(keepends=True)
        assert sorted(lines) == [f"same {n}\n".encode() for n in range(10)]  # each once
        for n in range(50):
            await tree.write(f"/d{n % 5}/f{n}", "changed\n" if n % 2 else f"same {n % 10}\n")
        await tree.checkpoint()  # one new content: a pack of it alone
        assert sorted(p.stat().st_size for p in store(tmp_path, "packs")) == [8, 70]
        await tree.rewind(1)
        assert [await tree.read(f"/d{n % 5}/f{n}") for n in range(50)] == [
            f"same {n % 10}\n" for n in range(50)
        ]
        assert store(tmp_path, "blobs") == []
        # (the rewind recorded nothing: checkpoint 2 held the state it left)
        assert await tree.prune_checkpoints(0) == [1, 2]
        # What the tree grew from (checkpoint 1's state) stays stored; "changed" goes.
        assert [p.stat().st_size for p in store(tmp_path, "packs")] == [70]
        await tree.write("/d0/f0", "x")
        await tree.checkpoint()
        again = durable_again(tmp_path)
        await again.rewind(3)
        assert await again.read("/d1/f1") == "same 1\n"

    run("trio", body)


def test_read_entries_answers_lstat_and_the_bytes_of_small_files(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"a" * 3000)
    (tmp_path / "big").write_bytes(b"b" * 5000)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b").write_bytes(b"")
    (tmp_path / "link").symlink_to("a")
    os.mkfifo(tmp_path / "fifo")
    tree = vfs.dir_fs(str(tmp_path))
    paths = ["/a", "/big", "/d/b", "/d", "/link", "/fifo", "/missing", "/d/b/x"]
    found = tree.read_entries(paths, 4096)
    kinds = [(info.kind if info.exists else None, data) for info, data in found]
    assert kinds == [
        ("file", b"a" * 3000),
        ("file", None),  # not under the limit
        ("file", b""),
        ("directory", None),
        ("symlink", None),
        ("file", None),  # a FIFO, opened without blocking and not read
        (None, None),
        (None, None),
    ]
    assert found[5][0].special == "fifo" and found[1][0].size == 5000
    # (reading a file moves its atime)
    now = [replace(info, atime_ns=0) for info, _ in found]
    assert now == [replace(run_lstat(tree, path), atime_ns=0) for path in paths]


def run_lstat(tree: vfs.DirFileSystem, path: str) -> vfs.FileInfo:
    box: list[vfs.FileInfo] = []

    async def body() -> None:
        box.append(await tree.lstat(path))

    run("trio", body)
    return box[0]


def test_create_files_writes_each_whole_under_its_name(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    tree = vfs.dir_fs(str(tmp_path))
    tree.create_files("/store", {"x": b"one", "y": b""})
    tree.create_files("/store", {"x": b"two"})
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == ["x", "y"]
    assert (tmp_path / "store" / "x").read_bytes() == b"two"
    read_only = vfs.dir_fs(str(tmp_path), read_only=True)
    with pytest.raises(vfs.ReadOnlyMountError) as refused:
        read_only.create_files("/store", {"z": b"z"})
    assert str(refused.value) == "read-only mount: /store"
    assert not (tmp_path / "store" / "z").exists()


def checkpoint_files(tmp_path: Path) -> dict[int, dict[str, object]]:
    found = {}
    for path in (tmp_path / "upper" / ".agentroot-cow" / "checkpoints").glob("*.json"):
        found[int(path.stem)] = json.loads(path.read_text())
    return found


def test_a_checkpoint_writes_what_changed_not_the_whole_upper(tmp_path: Path) -> None:
    async def body() -> None:
        tree = durable(tmp_path)
        for n in range(2000):
            await tree.write(f"/d{n % 20}/f{n}", f"{n}\n")
        await tree.checkpoint()  # 1: whole
        for turn in range(40):
            await tree.write(f"/d{turn % 20}/f{turn}", f"turn {turn}\n")
            await tree.checkpoint()
        files = checkpoint_files(tmp_path)
        assert "manifest" in files[1] and len(files[1]["manifest"]) == 2020  # type: ignore[arg-type]
        deltas = [n for n, data in files.items() if "base" in data]
        assert len(deltas) >= 38  # a whole one at most every 32
        assert all(len(files[n]["changes"]) == 1 for n in deltas)  # type: ignore[arg-type]
        # Prune the middle of the chains away: every kept one still resolves.
        await tree.prune_checkpoints(3)
        kept = [record.number for record in await tree.checkpoints()]
        assert kept == [39, 40, 41]
        await tree.rewind(39)
        assert await tree.read("/d17/f37") == "turn 37\n"
        assert await tree.read("/d18/f38") == "38\n"
        fresh = durable_again(tmp_path)  # a new process: the same checkpoints, resolved
        await fresh.rewind(41)
        assert await fresh.read("/d19/f39") == "turn 39\n"
        assert await fresh.read("/d0/f0") == "turn 0\n"

    run("trio", body)


def durable_again(tmp_path: Path) -> vfs.FileSystem:
    lower = vfs.dir_fs(str(tmp_path / "lower"), read_only=True)
    return vfs.cow_fs(lower, vfs.dir_fs(str(tmp_path / "upper")))


def test_a_rewind_note_left_by_a_kill_is_not_taken_for_the_base(tmp_path: Path) -> None:
    """A rewind notes which checkpoint the tree grew from; the next checkpoint removes the note.
    Killed between the two, the note must not make a restart count from the rewound-to state."""

    async def body() -> None:
        tree = durable(tmp_path)
        await tree.checkpoint()  # 1
        await tree.write("/a.txt", "a\n")
        await tree.rewind(1)  # 2: "before rewind to 1"
        note = tmp_path / "upper" / ".agentroot-cow" / "checkpoints" / "base"
        left = note.read_text()
        await tree.write("/b.txt", "b\n")
        await tree.checkpoint()  # 3, which removed the note...
        note.write_text(left)  # ...or a kill kept it
        again = durable_again(tmp_path)
        fourth = await again.checkpoint()
        assert fourth.summary == vfs.Summary()  # since 3, not since 1
        assert not note.exists()

    run("trio", body)
