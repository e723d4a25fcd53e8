"""Properties of apply's rule table (``mountd._apply_rules.GIT_RULES``), over generated paths:
inside any git directory what makes git run something or look elsewhere is refused whatever the
change, a symlink is always refused, and outside every git directory the table says nothing."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mountd._apply_rules import NESTED_GIT, git_reason

ENTRIES = st.sampled_from(["file", "directory", "symlink"])
CHANGES = st.sampled_from(["added", "modified", "deleted", "mode_changed"])
NAMES = st.text(alphabet="abcdefgHIJ0123456789._-", min_size=1, max_size=8).filter(
    lambda name: name not in (".", "..") and name.lower() != ".git"
)
WORK_TREE = st.lists(NAMES, max_size=3).map(lambda names: "".join("/" + n for n in names))
GIT_NAME = st.sampled_from([".git", ".GIT", ".Git"])
RUNNABLE = st.sampled_from(
    [
        "hooks",
        "config",
        "config.worktree",
        "commondir",
        "worktrees",
        "modules",
        "info",
        "objects/info",
        "rebase-merge",
        "rebase-apply",
        "sequencer",
    ]
)


@given(WORK_TREE, GIT_NAME, RUNNABLE, st.lists(NAMES, max_size=3), ENTRIES, CHANGES)
def test_what_git_runs_or_follows_is_refused_everywhere(
    above: str, git: str, runnable: str, below: list[str], entry: str, change: str
) -> None:
    path = f"{above}/{git}/{runnable}" + "".join("/" + n for n in below)
    assert git_reason(path, entry, change) is not None


@given(WORK_TREE, GIT_NAME, st.lists(NAMES, max_size=4), CHANGES)
def test_a_symlink_inside_a_git_directory_is_always_refused(
    above: str, git: str, below: list[str], change: str
) -> None:
    path = f"{above}/{git}" + "".join("/" + n for n in below)
    assert git_reason(path, "symlink", change) is not None


@given(WORK_TREE, GIT_NAME, st.lists(NAMES, max_size=3), CHANGES)
def test_a_lock_file_inside_a_git_directory_is_always_refused(
    above: str, git: str, below: list[str], change: str
) -> None:
    path = f"{above}/{git}" + "".join("/" + n for n in below) + "/x.lock"
    assert git_reason(path, "file", change) is not None


@given(WORK_TREE, GIT_NAME, st.lists(NAMES, max_size=2), GIT_NAME, ENTRIES, CHANGES)
def test_a_git_directory_inside_a_git_directory_is_refused(
    above: str, outer: str, middle: list[str], inner: str, entry: str, change: str
) -> None:
    path = f"{above}/{outer}" + "".join("/" + n for n in middle) + f"/{inner}/HEAD"
    assert git_reason(path, entry, change) == NESTED_GIT


@given(WORK_TREE.filter(bool), ENTRIES, CHANGES)
def test_outside_every_git_directory_the_table_says_nothing(
    path: str, entry: str, change: str
) -> None:
    assert git_reason(path, entry, change) is None
