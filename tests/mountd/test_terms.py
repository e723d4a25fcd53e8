"""The terms a mount is served on: negotiated from the options, pyfuse3 and the tree, no mount."""

from __future__ import annotations

import itertools
from dataclasses import fields
from pathlib import Path

import pytest

import vfs
from mountd import MountOptions
from mountd._attrs import AttrPolicy, OwnerMap
from mountd._terms import FuseFeatures, Terms, TreeFeatures, negotiate
from tests.vfs.eightverb import EightVerbTree

PATCHED = FuseFeatures(
    list_by_inode=True, own_page_cache=True, files_by_inode=True, own_inode_numbers=True
)
WRITES_THROUGH = TreeFeatures(buffers_writes=False, lists_reusing=True)

_SWITCHES = (
    "writeback",
    "cache_listings",
    "keep_written_pages",
    "files_by_inode",
    "complete_pages",
    "reuse_known_attributes",
)


def _every_combination() -> list[tuple[MountOptions, FuseFeatures, TreeFeatures]]:
    """Every option switch that feeds a term, both attribute timeouts that matter, every
    pyfuse3 ability and every tree ability: 2**13 combinations."""
    combinations = []
    for switches in itertools.product((False, True), repeat=len(_SWITCHES)):
        for attr_timeout in (0.0, 300.0):
            chosen = dict(zip(_SWITCHES, switches, strict=True))
            if chosen["writeback"] and attr_timeout == 0:
                continue  # refused by MountOptions itself
            options = MountOptions(attr_timeout=attr_timeout, **chosen)
            for fuse in itertools.product((False, True), repeat=4):
                for tree in itertools.product((False, True), repeat=2):
                    combinations.append((options, FuseFeatures(*fuse), TreeFeatures(*tree)))
    return combinations


COMBINATIONS = _every_combination()


def test_the_combinations_cover_every_input() -> None:
    # 2**6 switches by two timeouts, less writeback without attribute caching; 2**4 and 2**2.
    assert len(COMBINATIONS) == (2**6 * 2 - 2**5) * 2**4 * 2**2


@pytest.mark.parametrize("term", [f.name for f in fields(Terms)])
def test_each_term_holds_exactly_when_everything_it_needs_does(term: str) -> None:
    for options, fuse, tree in COMBINATIONS:
        terms = negotiate(options, fuse, tree)
        by_inode = (
            options.files_by_inode
            and fuse.files_by_inode
            and not tree.buffers_writes
            and not options.writeback
        )
        drops = not (options.keep_written_pages and fuse.own_page_cache)
        expected = {
            "writeback_cache": options.writeback,
            "forwards_flush": tree.buffers_writes,
            "files_by_inode": by_inode,
            "kernel_drops_pages": drops,
            "complete_pages": options.complete_pages and by_inode and not drops,
            "listings_by_inode": options.cache_listings and fuse.list_by_inode,
            "reuses_attributes": (
                options.reuse_known_attributes and options.attr_timeout > 0 and tree.lists_reusing
            ),
            "shows_tree_inos": fuse.own_inode_numbers,
        }[term]
        assert getattr(terms, term) is expected, (options, fuse, tree)


def test_no_combination_serves_by_inode_what_needs_a_handle() -> None:
    """The invariants the handlers rely on, whatever was asked for."""
    for options, fuse, tree in COMBINATIONS:
        terms = negotiate(options, fuse, tree)
        if terms.files_by_inode:  # no RELEASE: nothing may wait in a handle for a close
            assert not terms.forwards_flush and not terms.writeback_cache
        if terms.complete_pages:  # the tree holds every byte, and the kernel keeps the pages
            assert terms.files_by_inode and not terms.kernel_drops_pages


def test_a_stock_pyfuse3_gets_the_stock_behaviour() -> None:
    for options, _, tree in COMBINATIONS:
        terms = negotiate(options, FuseFeatures(), tree)
        assert terms.kernel_drops_pages
        assert not (terms.files_by_inode or terms.complete_pages or terms.listings_by_inode)
        assert not terms.shows_tree_inos


def test_the_default_terms_are_the_default_options_with_nothing_to_help() -> None:
    assert negotiate(MountOptions(), FuseFeatures(), TreeFeatures()) == Terms()


def test_the_default_options_over_a_write_through_tree_take_every_shortcut() -> None:
    assert negotiate(MountOptions(), PATCHED, WRITES_THROUGH) == Terms(
        forwards_flush=False,
        files_by_inode=True,
        kernel_drops_pages=False,
        complete_pages=True,
        listings_by_inode=True,
        reuses_attributes=True,
        shows_tree_inos=True,
    )


def test_trees_report_what_they_can_do(tmp_path: Path) -> None:
    host = vfs.dir_fs(str(tmp_path))
    assert TreeFeatures.of(vfs.temp_fs()) == WRITES_THROUGH
    assert TreeFeatures.of(host) == WRITES_THROUGH
    assert TreeFeatures.of(vfs.cow_fs(host)) == WRITES_THROUGH  # it lists reusing as its lower
    # posix_view's whole-file buffers write back at close: FLUSH must reach them.
    assert TreeFeatures.of(vfs.posix_view(EightVerbTree())) == TreeFeatures()
    buffering = negotiate(MountOptions(), PATCHED, TreeFeatures.of(vfs.posix_view(EightVerbTree())))
    assert buffering.forwards_flush and not buffering.files_by_inode


def test_the_options_fill_the_mounts_attribute_policy() -> None:
    owners = OwnerMap(tree_uid=1000, tree_gid=1000, uid=0, gid=0)
    options = MountOptions(entry_timeout=1, attr_timeout=2, negative_timeout=3, owners=owners)
    assert options.attr_policy(5, 6) == AttrPolicy(
        uid=5, gid=6, entry_timeout=1, attr_timeout=2, negative_timeout=3, owners=owners
    )
