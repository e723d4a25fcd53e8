"""The vfs compositions the mount suites serve, as plain module-level builders.

Theory of operation
-------------------
Each builder returns a fresh tree; the mount helper calls it in the daemon's child process, so
builders take only plain, picklable arguments (host paths) and import ``vfs`` lazily.

The overlay is read-only: a lower layer holding a variant of the sample tree (different bytes
where the upper layer overrides, and the files only the lower has) under an upper layer holding
the rest, so the merged view equals ``trees.SAMPLE`` exactly only if the overlay picks the upper
layer's entries and merges directories.
"""

from __future__ import annotations

from pathlib import Path

from . import trees


def temp() -> object:
    import vfs

    return vfs.temp_fs()


def eight_verb() -> object:
    """A tree with only the eight verbs, mounted through ``vfs.posix_view``."""
    import vfs
    from tests.vfs.eightverb import EightVerbTree

    return vfs.posix_view(EightVerbTree())


def dir_rw(host: Path) -> object:
    import vfs

    return vfs.dir_fs(str(host))


def dir_ro(host: Path) -> object:
    import vfs

    return vfs.dir_fs(str(host), read_only=True)


def cow(host: Path) -> object:
    """``mountd mount --ephemeral``'s tree at ``/``: ``host`` under copy-on-write, in memory."""
    import vfs

    return vfs.cow_fs(vfs.dir_fs(str(host)))


def cow_durable(lower: Path, upper: Path) -> object:
    """``mountd mount``'s default tree: copy-on-write over ``lower``, the changes in the
    directory ``upper`` (a session's)."""
    import vfs

    return vfs.cow_fs(vfs.dir_fs(lower), vfs.dir_fs(upper))


def union(host: Path) -> object:
    import vfs

    return vfs.union_fs({"/": vfs.temp_fs(), "/host": vfs.dir_fs(str(host))})


def audited_temp(log: Path) -> object:
    """temp_fs under an audit log, as ``mountd mount`` serves a spec."""
    import vfs
    from vfs._audit import AuditLog, audited_fs

    return audited_fs(vfs.temp_fs(), AuditLog(str(log)))


def overlay(lower: Path, upper: Path) -> object:
    import vfs

    return vfs.overlay_fs(
        [vfs.dir_fs(str(upper), read_only=True), vfs.dir_fs(str(lower), read_only=True)]
    )


# Entries the upper overlay layer holds; the lower holds everything else, plus stale variants.
UPPER_ONLY = ("README.md", "src/a.py", "data/big.bin", "deep/a/b/c/leaf.txt", "link_file")


def fill_overlay_layers(lower: Path, upper: Path) -> None:
    """Lay ``trees.SAMPLE`` out over two layers so that only a correct merge shows it whole."""
    upper_spec: dict[str, trees.Entry] = {}
    lower_spec: dict[str, trees.Entry] = {}
    for rel, entry in trees.SAMPLE.items():
        if rel in UPPER_ONLY:
            upper_spec[rel] = entry
            if isinstance(entry, trees.File):
                lower_spec[rel] = trees.File(b"STALE lower copy\n", entry.mode)
            elif isinstance(entry, trees.Link):
                lower_spec[rel] = trees.Link("stale-target")
        else:
            lower_spec[rel] = entry
    # The upper layer needs the parent directories of what it holds (same modes as the sample).
    for rel in list(upper_spec):
        parent = rel.rpartition("/")[0]
        while parent:
            upper_spec[parent] = trees.SAMPLE[parent]
            parent = parent.rpartition("/")[0]
    sample_lower, sample_upper = lower / "sample", upper / "sample"
    sample_lower.mkdir()
    sample_upper.mkdir()
    trees.write_tree(sample_lower, lower_spec)
    trees.write_tree(sample_upper, upper_spec)
