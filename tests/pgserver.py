"""A PostgreSQL server for the tests: the one in $POLICYGUARD_TEST_POSTGRES_URL, or a throwaway cluster.

The throwaway cluster is Debian's server binaries (``/usr/lib/postgresql/*/bin``):
``initdb`` into a temporary directory, ``pg_ctl start`` on 127.0.0.1 and a free
port (as the ``postgres`` user when we are root, since the server refuses to run
as root), stopped and deleted at the end of the session. Where no server can be
had the tests skip with the reason, except under ``$CI``, where they fail.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

ENV = "POLICYGUARD_TEST_POSTGRES_URL"


class NoServer(Exception):
    """No PostgreSQL server could be found or started; the message says why."""


def _bin_dir() -> Path:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not candidates:
        raise NoServer("no initdb under /usr/lib/postgresql/*/bin (apt-get install postgresql)")
    return Path(candidates[-1]).parent


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(args: list[str], user: str | None, timeout: float) -> None:
    try:
        done = subprocess.run(args, user=user, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NoServer(f"{Path(args[0]).name}: {exc}") from exc
    if done.returncode != 0:
        raise NoServer(f"{Path(args[0]).name} exited {done.returncode}: {(done.stderr or done.stdout).strip()[-400:]}")


@contextmanager
def throwaway_cluster(*, durable: bool = False) -> Iterator[str]:
    """Start a private cluster; yield its URL; stop it and delete its files.

    Tests run it with ``fsync=off`` (they kill clients, not the server);
    ``durable=True`` keeps PostgreSQL's default fsync, for benchmarks.
    """
    bin_dir = _bin_dir()
    user = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError as exc:
            raise NoServer("running as root and there is no 'postgres' user to run the server as") from exc
        user = "postgres"
    root = Path(tempfile.mkdtemp(prefix="pg-policyguard-"))
    if user is not None:
        shutil.chown(root, user=user)
    data = root / "data"
    started = False
    try:
        _run([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync"], user, 120)
        port = 0
        for _ in range(3):  # the port could be taken between finding it and binding it
            port = _free_port()
            options = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c max_connections=200"
            if not durable:
                options += " -c fsync=off"
            try:
                _run(
                    [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-o", options, "-w", "-t", "60"]
                    + ["start"],
                    user,
                    90,
                )
            except NoServer:
                continue
            started = True
            break
        if not started:
            log = (root / "log").read_text()[-400:] if (root / "log").exists() else ""
            raise NoServer(f"pg_ctl could not start a server: {log}")
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        if started:
            try:
                _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "-t", "30", "stop"], user, 60)
            except NoServer:
                pass
        shutil.rmtree(root, ignore_errors=True)


def check_psycopg() -> None:
    """Raise :class:`NoServer` unless the extra ``[postgres]`` is installed."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise NoServer(
            "psycopg/psycopg_pool are not installed (pip install -c constraints.txt -e '.[postgres]')"
        ) from exc


def check_reachable(url: str) -> None:
    """Raise :class:`NoServer` unless ``url`` answers a query within a few seconds."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=5, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        raise NoServer(f"{url}: {exc}") from exc


@contextmanager
def fresh_schema(server_url: str) -> Iterator[str]:
    """A new empty schema in the server's database; yields a URL whose search_path puts tables there."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(server_url, connect_timeout=5, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")  # type: ignore[arg-type]  # generated identifier
    separator = "&" if "?" in server_url else "?"
    try:
        yield f"{server_url}{separator}options={quote(f'-csearch_path={name}', safe='')}"
    finally:
        with psycopg.connect(server_url, connect_timeout=5, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")  # type: ignore[arg-type]
