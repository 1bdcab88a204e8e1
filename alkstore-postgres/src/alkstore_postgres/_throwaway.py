"""A throwaway PostgreSQL cluster, made with the machine's own server binaries.

Tests use it when no server is given, and to stop and start a server for
real. As root it runs the server as the ``postgres`` user.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["ThrowawayServer", "throwaway_cluster"]


class ThrowawayServer:
    """A PostgreSQL cluster of our own, made with the machine's server binaries,
    so tests can stop and start it. Runs as the ``postgres`` user under root."""

    def __init__(self, root: Path) -> None:
        self.bindir = _server_bindir()
        self.root = root
        self.data = root / "data"
        self.port = _free_port()
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        if os.geteuid() == 0:
            shutil.chown(root, "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self.start()

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "log"),
                  "-w", "start")  # fmt: skip

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def _run(self, program: str, *arguments: str) -> None:
        command = [str(Path(self.bindir) / program), *arguments]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)


def _server_bindir() -> str:
    # Debian keeps the real binaries per version; what is on PATH may be a wrapper.
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    found = candidates[0] if candidates else shutil.which("pg_ctl")
    if found is None:
        raise RuntimeError(
            "a throwaway PostgreSQL needs the server binaries (initdb, pg_ctl): install them, "
            "or give a server with ALKSTORE_PG_DSN"
        )
    return str(Path(found).parent)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def throwaway_cluster() -> Iterator[ThrowawayServer]:
    """A running cluster for the block; removed afterwards."""
    # Not under pytest's tmp_path: the postgres user must be able to reach it.
    root = Path(tempfile.mkdtemp(prefix="alkstore-pg-"))
    try:
        server = ThrowawayServer(root)
        try:
            yield server
        finally:
            with contextlib.suppress(subprocess.CalledProcessError):
                server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
