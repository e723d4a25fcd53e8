"""``mountd run`` over a real repository of a few thousand files (issue 4, "Sandbox roots").

One agent session, as a shell script run by ``mountd run`` (a real CLI subprocess, real
bubblewrap, real FUSE): it fixes a bug, edits a generated module and the README, renames a
directory with children, deletes files and a directory, adds a text module and a binary file,
retargets a symlink, makes a script executable, commits with git, runs the project's own test
command (``python3 -m unittest``, Debian's interpreter inside the sandbox) and prints a manifest
of the whole tree as it saw it.

Without ``--apply`` the host repository is byte-identical afterwards (content, mode, link target
and mtime of every entry, ``.git`` included), the summary lists exactly the expected changes and
``--diff`` holds the exact hunks; with ``--apply`` the host becomes what the agent saw and git
there shows the agent's commit on a clean tree.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import textwrap
from pathlib import Path

import pytest

from .sandbox_trees import MANIFEST_SCRIPT, git, git_env, manifest
from .test_run import mountd_run, private_state

pytestmark = [pytest.mark.mount, pytest.mark.slow]

__all__ = ["private_state"]  # the autouse fixture: every run gets its own state directory

# The generated part: DIRS * SUBDIRS * MODULES modules, TABLES * ROWS data files, ASSETS binaries.
DIRS, SUBDIRS, MODULES = 16, 10, 12
TABLES, ROWS = 24, 25
ASSETS = 40

CORE = '''\
"""Arithmetic helpers."""


def add(a, b):
    return a + b


def mul(a, b):
    return a * b


def mean(values):
    if not values:
        raise ValueError("mean of nothing")
    return sum(values) / (len(values) + 1)
'''

TEST_CORE = """\
import unittest

from calc.core import add, mean, mul


class Core(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)

    def test_mul(self):
        self.assertEqual(mul(2, 3), 6)

    def test_mean(self):
        self.assertEqual(mean([1, 2, 3, 6]), 3)
"""

# The tree's own data is part of the suite: every table is read, every generated directory seen.
TEST_TREE = f"""\
import os
import unittest

from calc.tables import total


class Tree(unittest.TestCase):
    def test_tables(self):
        self.assertGreater(total("data/tables"), 0)

    def test_generated(self):
        found = sum(len(files) for _, _, files in os.walk("src/gen"))
        self.assertGreaterEqual(found, {DIRS * SUBDIRS * MODULES - 5})
"""

TABLES_MODULE = '''\
"""Sums of the data tables."""

import os


def total(root):
    result = 0
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            with open(os.path.join(dirpath, name)) as handle:
                for line in handle:
                    result += int(line.split(",")[1])
    return result
'''

GUIDE = {
    "intro.md": "# Introduction\n\nStart here.\n",
    "setup.md": "# Setup\n\nRun the tests with `python3 -m unittest`.\n",
    "advanced/tuning.md": "# Tuning\n\nNothing to tune yet.\n",
    "advanced/internals/layout.md": "# Layout\n\nsrc/gen holds generated modules.\n",
}

NEW_BINARY = b"\x89PNG\r\n\x1a\n\x00\x01\x02\x03\xff\xfe"  # what AGENT's printf writes


def module_text(d: int, s: int, m: int) -> str:
    value = d * 10_000 + s * 100 + m
    return f'"""Generated module {d}/{s}/{m}."""\n\nVALUE = {value}\n\n\ndef f(x):\n    return x + VALUE\n'


def asset_bytes(n: int) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + bytes((n * 7 + i * 13) % 256 for i in range(600))


def big_repo(root: Path) -> Path:
    """A committed repository of a few thousand files: a package with a unittest suite, docs,
    tools (one executable), generated modules, data tables, binary assets and a symlink."""
    files: dict[str, str | bytes] = {
        "README.md": "# calc\n\nA small calculator package.\n\nSee docs/guide/intro.md.\n",
        ".gitignore": "__pycache__/\n*.pyc\n",
        "pyproject.toml": '[project]\nname = "calc"\nversion = "0.1.0"\n',
        "calc/__init__.py": "",
        "calc/core.py": CORE,
        "calc/tables.py": TABLES_MODULE,
        "tests/__init__.py": "",
        "tests/test_core.py": TEST_CORE,
        "tests/test_tree.py": TEST_TREE,
        "tools/build.sh": "#!/bin/sh\nexec python3 -m unittest -q\n",
        "tools/lint.py": "#!/usr/bin/env python3\nprint('lint: ok')\n",
    }
    files.update({f"docs/guide/{name}": text for name, text in GUIDE.items()})
    for d in range(DIRS):
        for s in range(SUBDIRS):
            for m in range(MODULES):
                files[f"src/gen/d{d:02}/s{s:02}/m{m:02}.py"] = module_text(d, s, m)
    for t in range(TABLES):
        for r in range(ROWS):
            files[f"data/tables/t{t:02}/r{r:02}.csv"] = f"row,{t * ROWS + r}\n"
    for n in range(ASSETS):
        files[f"assets/icons/i{n:02}.png"] = asset_bytes(n)
    for name, contents in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(contents, bytes):
            path.write_bytes(contents)
        else:
            path.write_text(contents)
    (root / "tools" / "build.sh").chmod(0o755)
    (root / "latest").symlink_to("docs/guide/intro.md")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


# The agent's session. `set -e`: every step must succeed, the project's tests included.
AGENT = textwrap.dedent(
    r"""
    set -e
    sed -i 's|(len(values) + 1)|len(values)|' calc/core.py
    printf '\nEdited inside the sandbox.\n' >> README.md
    sed -i 's/VALUE = 100503/VALUE = -1/' src/gen/d10/s05/m03.py
    mv docs/guide docs/manual
    ln -sfn docs/manual/intro.md latest
    sed -i 's|docs/guide/intro.md|docs/manual/intro.md|' README.md
    rm src/gen/d05/s03/m07.py src/gen/d05/s03/m08.py
    rm -r data/tables/t23
    printf 'def median(values):\n    ordered = sorted(values)\n    return ordered[len(ordered) // 2]\n' > calc/stats.py
    printf '\211PNG\r\n\032\n\000\001\002\003\377\376' > assets/new.png
    chmod +x tools/lint.py
    git add -A
    git commit -q -m "agent: fix mean, move the guide"
    python3 -m unittest -q
    python3 -c '{manifest}'
    """
).format(manifest=MANIFEST_SCRIPT.replace("'", "'\\''"))


def agent_changes() -> dict[str, str]:
    """AGENT's changes outside .git: path (a directory's with a trailing slash) -> letter."""
    changes = {
        "/README.md": "M",
        "/assets/new.png": "A",
        "/calc/core.py": "M",
        "/calc/stats.py": "A",
        "/data/tables/t23/": "D",
        "/docs/manual/": "R",
        "/docs/manual/advanced/": "R",
        "/docs/manual/advanced/internals/": "R",
        "/latest": "M",
        "/src/gen/d05/s03/m07.py": "D",
        "/src/gen/d05/s03/m08.py": "D",
        "/src/gen/d10/s05/m03.py": "M",
        "/tools/lint.py": "m",
    }
    changes.update({f"/data/tables/t23/r{r:02}.csv": "D" for r in range(ROWS)})
    changes.update({f"/docs/manual/{name}": "R" for name in GUIDE})
    return changes


def expected_summary() -> list[str]:
    """The summary's lines for AGENT's changes outside .git, in path order."""
    changes = agent_changes()
    lines = []
    for path in sorted(changes, key=lambda p: p.rstrip("/")):
        line = f"  {changes[path]} {path}"
        if changes[path] == "R":
            line += f" (from {path.replace('/docs/manual/', '/docs/guide/')})"
        if path == "/latest":
            line += " -> docs/manual/intro.md"
        if changes[path] == "m":
            line += " (mode 0644 -> 0755)"  # (chmod +x: the one mode change)
        lines.append(line)
    return lines


# Exact pieces of the --diff output: whole per-file sections where the file has one.
EXPECTED_HUNKS = [
    "diff --git a/README.md b/README.md\n"
    "--- a/README.md\n"
    "+++ b/README.md\n"
    "@@ -2,4 +2,6 @@\n"
    " \n"
    " A small calculator package.\n"
    " \n"
    "-See docs/guide/intro.md.\n"
    "+See docs/manual/intro.md.\n"
    "+\n"
    "+Edited inside the sandbox.\n"
    "diff --git ",
    "diff --git a/calc/core.py b/calc/core.py\n"
    "--- a/calc/core.py\n"
    "+++ b/calc/core.py\n"
    "@@ -12,4 +12,4 @@\n"
    " def mean(values):\n"
    "     if not values:\n"
    '         raise ValueError("mean of nothing")\n'
    "-    return sum(values) / (len(values) + 1)\n"
    "+    return sum(values) / len(values)\n"
    "diff --git ",
    "diff --git a/calc/stats.py b/calc/stats.py\n"
    "new file mode 100644\n"
    "--- /dev/null\n"
    "+++ b/calc/stats.py\n"
    "@@ -0,0 +1,3 @@\n"
    "+def median(values):\n"
    "+    ordered = sorted(values)\n"
    "+    return ordered[len(ordered) // 2]\n"
    "diff --git ",
    "diff --git a/data/tables/t23/r07.csv b/data/tables/t23/r07.csv\n"
    "deleted file mode 100644\n"
    "--- a/data/tables/t23/r07.csv\n"
    "+++ /dev/null\n"
    "@@ -1 +0,0 @@\n"
    "-row,582\n"
    "diff --git ",
    "diff --git a/docs/guide/advanced/internals/layout.md b/docs/manual/advanced/internals/layout.md\n"
    "rename from docs/guide/advanced/internals/layout.md\n"
    "rename to docs/manual/advanced/internals/layout.md\n"
    "diff --git ",
    "diff --git a/latest b/latest\n"
    "--- a/latest\n"
    "+++ b/latest\n"
    "@@ -1 +1 @@\n"
    "-docs/guide/intro.md\n"
    "\\ No newline at end of file\n"
    "+docs/manual/intro.md\n"
    "\\ No newline at end of file\n"
    "diff --git ",
    "diff --git a/src/gen/d05/s03/m07.py b/src/gen/d05/s03/m07.py\n"
    "deleted file mode 100644\n"
    "--- a/src/gen/d05/s03/m07.py\n"
    "+++ /dev/null\n"
    "@@ -1,7 +0,0 @@\n"
    + "".join("-" + line + "\n" for line in module_text(5, 3, 7).splitlines())
    + "diff --git ",
    "diff --git a/src/gen/d10/s05/m03.py b/src/gen/d10/s05/m03.py\n"
    "--- a/src/gen/d10/s05/m03.py\n"
    "+++ b/src/gen/d10/s05/m03.py\n"
    "@@ -1,6 +1,6 @@\n"
    ' """Generated module 10/5/3."""\n'
    " \n"
    "-VALUE = 100503\n"
    "+VALUE = -1\n"
    " \n"
    " \n"
    " def f(x):\n"
    "diff --git ",
]
BINARY_DIFF = (
    "diff --git a/assets/new.png b/assets/new.png\n"
    "new file mode 100644\n"
    "Binary files /dev/null and b/assets/new.png differ\n"
    "diff --git "
)
MODE_DIFF = "diff --git a/tools/lint.py b/tools/lint.py\nold mode 100644\nnew mode 100755\n"


def host_state(root: Path) -> dict[str, list[object]]:
    """``manifest`` plus every entry's mtime: the host must not even be touched."""
    state = manifest(root)
    for path in state:
        state[path] = [*state[path], os.lstat(root / path[1:]).st_mtime_ns]
    return state


def summary_of(stderr: str) -> list[str]:
    lines = stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("mountd run: the command"))
    return lines[start:]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return big_repo(tmp_path_factory.mktemp("template") / "repo")


@pytest.fixture
def repo(template: Path, tmp_path: Path) -> Path:
    """A copy of the template repository (modes, times and links kept) for one test."""
    return Path(shutil.copytree(template, tmp_path / "repo", symlinks=True))


def test_run_leaves_the_host_byte_identical_and_reports_exactly(repo: Path) -> None:
    assert len(git(repo, "ls-files").splitlines()) > 2500
    assert git(repo, "status", "--porcelain") == ""
    before = host_state(repo)
    done = mountd_run("--diff", "--", "sh", "-c", AGENT, cwd=repo, timeout=120)
    assert done.returncode == 0, done.stderr
    assert host_state(repo) == before  # .git included, mtimes included
    manifest_text, _, diff = done.stdout.partition("}")
    seen = json.loads(manifest_text + "}")
    assert "/docs/guide" not in seen and "/docs/manual/advanced/internals/layout.md" in seen
    summary = summary_of(done.stderr)
    head = re.fullmatch(
        r"mountd run: the command exited with status 0; (\d+) changes in the copy-on-write tree",
        summary[0],
    )
    assert head is not None, done.stderr
    expected = expected_summary()
    assert summary[1 : 1 + len(expected)] == expected
    git_line = re.fullmatch(
        r"  /\.git: (\d+) changes \(git's own files\)", summary[1 + len(expected)]
    )
    assert git_line is not None, done.stderr
    assert int(head[1]) == len(expected) + int(git_line[1])
    moved, staged = summary[2 + len(expected) :]  # what git's own files do: the commit
    assert re.fullmatch(r"    refs/heads/main: [0-9a-f]{12} -> [0-9a-f]{12}", moved), moved
    assert re.fullmatch(r"    index: stages \d+ paths: .+", staged), staged
    for hunk in EXPECTED_HUNKS:
        assert hunk in diff, hunk
    files = [path for path in agent_changes() if not path.endswith("/")]
    assert diff.count("diff --git ") == len(files)  # one section per file, none per directory
    assert BINARY_DIFF in diff
    assert diff.endswith(MODE_DIFF)  # the last path in order
    assert "PNG" not in diff and "\x00" not in diff  # the binary is named, never dumped
    assert ".git/" not in diff


def project_tests(repo: Path) -> subprocess.CompletedProcess[str]:
    """The project's own test command on the host (Debian's python3, as in the sandbox)."""
    return subprocess.run(
        ["/usr/bin/python3", "-m", "unittest", "-q"],
        cwd=repo,
        env=git_env(),  # PYTHONDONTWRITEBYTECODE: no __pycache__ in the compared tree
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_run_apply_makes_the_host_what_the_agent_saw(repo: Path) -> None:
    assert "FAIL: test_mean" in project_tests(repo).stderr  # the bug the agent fixes
    done = mountd_run("--apply", "--", "sh", "-c", AGENT, cwd=repo, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Ran 5 tests" in done.stderr  # the project's suite, run inside the sandbox
    seen = json.loads(done.stdout)
    # Everything the agent saw, .git included (it could not write .git/hooks or .git/config,
    # which apply would leave out).
    # Every file as the agent saw it, but git's index: apply writes git's rebuild of it (the
    # same entries, none of the cached data; see mountd._git_index), which status reads.
    index = "/.git/index"
    assert {p: v for p, v in manifest(repo).items() if p != index} == {
        p: v for p, v in seen.items() if p != index
    }
    assert project_tests(repo).returncode == 0
    assert re.search(r"mountd run: applied \d+ changes to dir_fs\(", done.stderr), done.stderr
    assert git(repo, "log", "--format=%s") == "agent: fix mean, move the guide\ninitial\n"
    assert git(repo, "status", "--porcelain") == ""
    git(repo, "fsck", "--strict")
    assert (repo / "assets" / "new.png").read_bytes() == NEW_BINARY
    assert os.readlink(repo / "latest") == "docs/manual/intro.md"
    assert stat.S_IMODE((repo / "tools" / "lint.py").stat().st_mode) == 0o755
    assert not (repo / "docs" / "guide").exists()


def test_a_command_outlives_the_event_loop_s_idle_worker_threads(tmp_path: Path) -> None:
    """``--die-with-parent`` kills bwrap when the *thread* that started it exits; trio's idle
    worker threads exit after 10 s, so a run started from one was SIGKILLed 10 s in."""
    done = mountd_run("--", "sh", "-c", "sleep 11; echo survived", cwd=tmp_path, timeout=60)
    assert (done.returncode, done.stdout) == (0, "survived\n"), done.stderr
