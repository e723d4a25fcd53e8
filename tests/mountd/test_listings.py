"""Directory snapshots for readdir, over real trees and inode tables, without a mount."""

from __future__ import annotations

from pathlib import Path

import trio

import vfs
from mountd._handles import HandleTable, Listing
from mountd._inodes import InodeTable
from mountd._listings import Listings
from mountd._vouch import Generation, Vouching
from vfs._capabilities import list_reusing_of


def _names(listing: Listing) -> list[str]:
    return [name for _, name, _ in listing.entries]


def test_a_listing_is_snapshot_at_offset_zero_and_resumed_from_it() -> None:
    async def main() -> None:
        tree, generation = vfs.temp_fs({"/d/a": "1", "/d/b": "22"}), Generation()
        table = InodeTable()
        vouched = Vouching(generation, enabled=False)
        listings = Listings(tree, table, vouched, generation, reusing=None)
        directory = table.remember(table.root, "d", await tree.lstat("/d"))
        first = await listings.listing(directory, None, 0)
        assert _names(first) == [".", "..", "a", "b"] and first.generation == generation.now
        sizes = {name: info.size for _, name, info in first.entries if info is not None}
        assert sizes == {"a": 1, "b": 2}
        await tree.write("/d/c", "333")
        generation.move()
        resumed = await listings.listing(directory, None, first.entries[2][0])
        assert resumed is first  # the same snapshot: offsets already handed out hold
        listings.read_whole(directory)
        again = await listings.listing(directory, None, 0)
        assert _names(again) == [".", "..", "a", "b", "c"]
        assert [offset for offset, _, _ in again.entries[:4]] == [
            offset for offset, _, _ in first.entries
        ]  # names keep their offsets across snapshots

    trio.run(main)


def test_a_listing_through_a_handle_lives_on_the_handle() -> None:
    async def main() -> None:
        tree, generation = vfs.temp_fs({"/a": "1"}), Generation()
        table = InodeTable()
        listings = Listings(
            tree, table, Vouching(generation, enabled=False), generation, reusing=None
        )
        handle = HandleTable().add_dir(table.root)
        listing = await listings.listing(table.root, handle, 0)
        assert handle.listing is listing
        assert [offset for offset, _, _ in listing.entries] == [1, 2, 3]
        assert await listings.listing(table.root, None, 0) is not listing

    trio.run(main)


def test_a_removed_directory_lists_as_its_dots() -> None:
    async def main() -> None:
        tree, generation = vfs.temp_fs({"/d/a": "1"}), Generation()
        table = InodeTable()
        listings = Listings(
            tree, table, Vouching(generation, enabled=False), generation, reusing=None
        )
        directory = table.remember(table.root, "d", await tree.lstat("/d"))
        table.detach(directory)
        assert _names(await listings.listing(directory, None, 0)) == [".", ".."]

    trio.run(main)


def test_what_the_mount_vouches_for_is_answered_unexamined(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("1")
    (tmp_path / "b").write_text("22")

    async def main() -> None:
        tree, generation = vfs.dir_fs(str(tmp_path)), Generation()
        reusing = list_reusing_of(tree)
        assert reusing is not None
        vouched = Vouching(generation, enabled=True)
        table = InodeTable(dropped=vouched.dropped)
        listings = Listings(tree, table, vouched, generation, reusing=reusing)
        known = await tree.lstat("/a")
        node = table.remember(table.root, "a", known)
        vouched.vouch(node, known, generation.now)
        listing = await listings.listing(table.root, None, 0)
        infos = {name: info for _, name, info in listing.entries}
        assert infos["a"] is known  # unexamined
        assert infos["b"] is not None and infos["b"].size == 2

    trio.run(main)
