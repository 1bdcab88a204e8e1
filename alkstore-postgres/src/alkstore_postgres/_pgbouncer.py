"""A throwaway PgBouncer in transaction-pooling mode, in front of a given server.

Tests use it to run the engine (and the conformance suite) through a real
pooler: the machine's ``pgbouncer`` binary (Debian's package installs it in
``/usr/sbin``) as a subprocess on a free local port, with a configuration
and user list of its own in a temporary directory, trust authentication,
and every database of the server reachable (``* = host=... port=...``). As
root it runs as the ``postgres`` user: PgBouncer refuses to run as root.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict, make_conninfo

__all__ = ["PgBouncer", "find_pgbouncer", "pgbouncer"]

_START_TIMEOUT_S = 15.0
_STOP_TIMEOUT_S = 10.0
_RUN_AS = "postgres"
"""The user PgBouncer runs as under root (Debian's server packages create it)."""


def find_pgbouncer() -> str:
    """The ``pgbouncer`` binary's path.

    Raises:
        RuntimeError: none is installed, saying how to install one.
    """
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        raise RuntimeError(
            "pgbouncer is not installed (Debian, Ubuntu: apt-get install pgbouncer; "
            "the tests start it themselves, no service needs to run)"
        )
    return found


class PgBouncer:
    """A running PgBouncer in transaction mode; :attr:`dsn` reaches ``upstream``'s
    database through it (same user, database and password). :meth:`stop` and
    :meth:`start` stop and start it again on the same port, for outage tests."""

    def __init__(self, upstream: str, root: Path, *, pool_size: int = 20) -> None:
        self.binary = find_pgbouncer()
        self.root = root
        self.port = _free_port()
        params = conninfo_to_dict(upstream)
        self.user = str(params.get("user") or _RUN_AS)
        self.dsn = make_conninfo(upstream, host="127.0.0.1", port=str(self.port))
        """The upstream DSN with PgBouncer's address instead of the server's."""
        self.admin_dsn = make_conninfo(self.dsn, dbname="pgbouncer")
        """PgBouncer's admin console (``SHOW POOLS``, ``SHOW SERVERS``, ...)."""
        self.log = root / "pgbouncer.log"
        self.version = subprocess.run(
            [self.binary, "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.split("\n", 1)[0]
        """``PgBouncer 1.18.0``, say."""
        (root / "pgbouncer.ini").write_text(_config(params, self.port, self.user, root, pool_size))
        (root / "userlist.txt").write_text(f'"{_quoted(self.user)}" ""\n')
        self._command = [self.binary, str(root / "pgbouncer.ini")]
        if os.geteuid() == 0:
            for path in (root, *root.iterdir()):
                shutil.chown(path, _RUN_AS)
            self._command[1:1] = ["-u", _RUN_AS]
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        """Start PgBouncer on :attr:`port` and wait until it accepts connections.

        Raises:
            RuntimeError: it exited, or did not listen within 15 s (with its log).
        """
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self._command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            self._wait_until_listening(self.process)
        except BaseException:
            self.stop()
            raise

    def _wait_until_listening(self, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"pgbouncer exited at start (status {process.returncode}): "
                    f"{self.log_text()[-2000:]}"
                )
            with socket.socket() as probe:
                probe.settimeout(0.5)
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"pgbouncer did not listen on 127.0.0.1:{self.port} within "
                    f"{_START_TIMEOUT_S:g} s: {self.log_text()[-2000:]}"
                )
            time.sleep(0.05)

    def log_text(self) -> str:
        """What PgBouncer logged so far."""
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        """Stop PgBouncer (SIGTERM: it closes every connection at once); idempotent."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(_STOP_TIMEOUT_S)


def _config(params: Mapping[str, object], port: int, user: str, root: Path, pool_size: int) -> str:
    server: dict[str, object] = {
        "host": params.get("host") or "127.0.0.1",
        "port": params.get("port") or "5432",
    }
    if params.get("password"):
        server["password"] = params["password"]
    target = " ".join(f"{key}={_ini_value(str(value))}" for key, value in server.items())
    return "\n".join(
        [
            "[databases]",
            f"* = {target}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {root / 'userlist.txt'}",
            f"admin_users = {user}",
            "pool_mode = transaction",
            f"default_pool_size = {pool_size}",
            "max_client_conn = 1000",
            # the tests create and drop databases: idle server connections to a
            # dropped one would only linger
            "server_idle_timeout = 10",
            "",
        ]
    )


def _ini_value(value: str) -> str:
    """A value of a ``[databases]`` entry: libpq-style, quoted when it needs it."""
    if value and all(c.isalnum() or c in "._-/" for c in value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _quoted(user: str) -> str:
    return user.replace('"', '""')


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def pgbouncer(upstream: str, *, pool_size: int = 20) -> Iterator[PgBouncer]:
    """A PgBouncer in transaction mode in front of ``upstream``'s server for the block.

    Raises:
        RuntimeError: no ``pgbouncer`` is installed, or it did not start (with its log).
    """
    find_pgbouncer()
    # Not under pytest's tmp_path: the postgres user must be able to reach it.
    root = Path(tempfile.mkdtemp(prefix="alkstore-pgbouncer-"))
    try:
        bouncer = PgBouncer(upstream, root, pool_size=pool_size)
        try:
            yield bouncer
        finally:
            bouncer.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
