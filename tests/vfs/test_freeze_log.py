"""The freeze log against a walk: what a ``temp_fs`` notes as it freezes equals what
:func:`vfs._frozen.differences` finds by walking the two states.

Random changes (writes, directories, removals, renames of files and directories, hard links,
symlinks, mode changes) run on a ``temp_fs``; between them the tree is frozen at random, a
checkpoint is taken (the log starts again from it) or the tree is rewound. Every time the log
answers for two states, its answer must be the walk's, as a set; and the log must answer for
the state the tree grew from and the state now, which is what makes a checkpoint's summary
cost what changed.
"""

from __future__ import annotations

from typing import Any

import anyio
import hypothesis.strategies as st
from hypothesis import given, settings

import vfs
from vfs._frozen import FrozenDir, differences

NAMES = ("/a", "/b", "/d", "/d/a", "/d/b", "/d/e", "/d/e/a", "/e", "/e/a")

operations = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.sampled_from(NAMES), st.binary(max_size=3)),
        st.tuples(st.just("mkdir"), st.sampled_from(NAMES)),
        st.tuples(st.just("remove"), st.sampled_from(NAMES)),
        st.tuples(st.just("rename"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
        st.tuples(st.just("link"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
        st.tuples(st.just("symlink"), st.sampled_from(NAMES)),
        st.tuples(st.just("chmod"), st.sampled_from(NAMES)),
        st.tuples(st.just("freeze")),
        st.tuples(st.just("checkpoint")),
        st.tuples(st.just("rewind")),
    ),
    max_size=40,
)


def _as_set(found: Any) -> set[tuple[str, int, int]]:
    return {(path, id(then), id(now)) for path, then, now in found}


async def _apply(tree: Any, step: tuple[Any, ...]) -> None:
    verb, *args = step
    try:
        if verb == "write":
            await tree.write(args[0], args[1])
        elif verb == "mkdir":
            await tree.mkdir(args[0])
        elif verb == "remove":
            info = await tree.lstat(args[0])
            if info.kind == "directory":
                await tree.rmdir(args[0])
            else:
                await tree.unlink(args[0])
        elif verb == "rename":
            await tree.rename(args[0], args[1])
        elif verb == "link":
            await tree.link(args[0], args[1])
        elif verb == "symlink":
            await tree.symlink("a", args[0])
        elif verb == "chmod":
            await tree.setattr(args[0], mode=0o700)
    except OSError:
        pass  # refused (missing, exists, not empty...): the tree is unchanged


@settings(max_examples=200, deadline=None)
@given(operations)
def test_the_log_answers_what_a_walk_finds(steps: list[tuple[Any, ...]]) -> None:
    async def body() -> None:
        tree = vfs.temp_fs({"/d/a": b"x", "/e/a": b"y"})
        await tree.checkpoint()
        states: list[FrozenDir] = [tree.frozen_root()]
        for step in steps:
            verb = step[0]
            if verb == "freeze":
                states.append(tree.frozen_root())
            elif verb == "checkpoint":
                await tree.checkpoint()
                states.append(tree.frozen_root())
            elif verb == "rewind":
                records = await tree.checkpoints()
                await tree.rewind(records[0].number)
                states.append(tree.frozen_root())
            else:
                await _apply(tree, step)
            now = tree.frozen_root()
            grew_from = tree._history.base()
            assert tree._log.between(grew_from, now) is not None
            for old in [*states, grew_from]:
                known = tree._log.between(old, now)
                if known is not None:
                    assert _as_set(known) == _as_set(differences(old, now))
                    assert [path for path, _, _ in known] == sorted(p for p, _, _ in known)

    anyio.run(body)
