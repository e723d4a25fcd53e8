"""Trees the S3 mount tests serve, as picklable module-level builders (see tests.mountd.mounting).

Each mount is a separate daemon process, so each has its own ``S3HostFiles`` and cache: two
mounts of the same bucket and prefix are two hosts sharing a durable root.
"""

from __future__ import annotations

from collections.abc import Mapping

TTL = 0.5

SPEC = """
[root]
type = "union"

[root.mounts."/"]
type = "s3"
endpoint = "{endpoint}"
bucket = "{bucket}"
prefix = "{prefix}"
metadata_ttl = {ttl}

[root.mounts."/scratch"]
type = "temp"
"""


def spec_text(endpoint: str, bucket: str, prefix: str, ttl: float = TTL) -> str:
    """A spec serving the S3 prefix at ``/`` and host-local scratch space at ``/scratch``."""
    return SPEC.format(endpoint=endpoint, bucket=bucket, prefix=prefix, ttl=ttl)


def spec_root(text: str, environment: Mapping[str, str]) -> object:
    """Build the tree of a spec the way ``mountd mount`` does, credentials from the environment."""
    import os
    from pathlib import Path

    from mountd import _spec

    os.environ.update(environment)
    return _spec.build(_spec.parse_spec(text, file="s3.toml", base_dir=Path.cwd()))
