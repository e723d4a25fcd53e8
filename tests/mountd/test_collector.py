"""A serving process's collector: what is alive is frozen, young objects collected rarely."""

from __future__ import annotations

import subprocess
import sys

from mountd._collector import YOUNG_THRESHOLD

PROBE = """
import gc
from mountd._collector import tune_for_serving
before = gc.get_threshold()
tune_for_serving()
print(gc.get_freeze_count() > 0, gc.get_threshold()[0], gc.get_threshold()[1:] == before[1:])
"""


def test_serving_freezes_what_is_alive_and_collects_young_objects_rarely() -> None:
    # In a child: the setting is the whole process's, and pytest's must stay as it is.
    out = subprocess.run(
        [sys.executable, "-c", PROBE], check=True, capture_output=True, text=True
    ).stdout.split()
    assert out == ["True", str(YOUNG_THRESHOLD), "True"]
