"""Test tooling: a throwaway PostgreSQL server (``initdb`` + ``postgres`` in a folder).

Why this exists: the PostgreSQL fencing target (:mod:`leasehold.fencing.postgres`)
is tested against a real server, and the project's machines run no Docker.
Debian's ``postgresql`` package ships the server binaries; this module makes a
fresh cluster in a work directory, starts it on a free loopback TCP port (the
unix socket goes in the work directory too, never ``/var/run/postgresql``),
and throws it away afterwards. Durability is switched off (``fsync=off``):
the data lives only as long as the test run.

The server is started as a child process (``postgres -D ...``) rather than
daemonized with ``pg_ctl start``: the child is tied to this process with
Linux's ``PR_SET_PDEATHSIG`` (SIGQUIT, PostgreSQL's immediate shutdown), so a
test run killed with SIGKILL leaks no server, the same guarantee
``localcluster`` gives its etcd.

PostgreSQL refuses to run as root. When this process is root, ``initdb`` and
the server run as the ``postgres`` system user (created by Debian's package)
and the work directory is handed to that user; every folder above it must be
traversable by others (``/tmp`` is, ``tempfile.mkdtemp`` folders are not until
made 0755, which :func:`make_workdir` does).

From Python::

    with PostgresServer(make_workdir()) as dsn:
        psycopg.connect(dsn)

From pytest: the ``postgres_dsn`` fixture in :mod:`pgserver.pytest_plugin`.

Needs the standard library only (no ``psycopg``: readiness is asked of
``pg_isready``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final

from ports import free_port

__all__ = [
    "INSTALL_HINT",
    "PostgresServer",
    "PostgresServerError",
    "find_bin_dir",
    "make_workdir",
]

INSTALL_HINT: Final = "apt-get install postgresql"
"""What to run on Debian/Ubuntu when the server binaries are missing."""
SERVER_BINARIES: Final = ("initdb", "postgres", "pg_isready")
"""The executables this module runs, all from one PostgreSQL bin directory."""
SYSTEM_USER: Final = "postgres"
"""The user the server runs as when this process is root."""
SUPERUSER: Final = "leasehold"
"""The database superuser ``initdb`` creates (trust authentication, loopback only)."""
DATABASE: Final = "postgres"
"""The database the DSN names (``initdb`` creates it)."""

_DEBIAN_ROOT: Final = Path("/usr/lib/postgresql")
_START_ATTEMPTS: Final = 3
_PR_SET_PDEATHSIG: Final = 1


class PostgresServerError(Exception):
    """The server could not be provided; the message says what is missing or failed."""


# --------------------------------------------------------------------------
# Finding the binaries


def _has_binaries(bin_dir: Path) -> bool:
    return all(os.access(bin_dir / name, os.X_OK) for name in SERVER_BINARIES)


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", path.parent.name)) or (0,)


def find_bin_dir() -> Path:
    """Find a folder holding ``initdb``, ``postgres`` and ``pg_isready``.

    Looks, in order, at ``pg_config --bindir``, the newest
    ``/usr/lib/postgresql/<version>/bin`` (Debian's layout: the server
    binaries are not on ``PATH`` there), and the folder of ``initdb`` on
    ``PATH``.

    Returns:
        The bin directory.

    Raises:
        PostgresServerError: none of them has all three binaries; the message
            lists where it looked and how to install them.
    """
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=30
            ).stdout.strip()
            if out:
                candidates.append(Path(out))
    candidates.extend(
        sorted((p.parent for p in _DEBIAN_ROOT.glob("*/bin/initdb")), key=_version_key)[::-1]
    )
    on_path = shutil.which("initdb")
    if on_path is not None:
        candidates.append(Path(on_path).resolve().parent)
    for candidate in candidates:
        if _has_binaries(candidate):
            return candidate
    looked = ", ".join(dict.fromkeys(str(c) for c in candidates)) or "no candidate folder"
    raise PostgresServerError(
        f"PostgreSQL server binaries not found ({', '.join(SERVER_BINARIES)}; "
        f"looked in pg_config --bindir, {_DEBIAN_ROOT}/*/bin and PATH: {looked}): "
        f"{INSTALL_HINT}"
    )


# --------------------------------------------------------------------------
# Users and folders


def make_workdir(prefix: str = "leasehold-pg-") -> Path:
    """Create an empty work directory under the temp folder, mode 0755.

    ``tempfile.mkdtemp`` makes 0700 folders, which the ``postgres`` user
    cannot enter when the server has to run as that user.

    Args:
        prefix: the folder name's prefix.

    Returns:
        The new folder (the caller removes it).
    """
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


def _server_user() -> pwd.struct_passwd | None:
    """The account to run the server as: ``None`` for this process's own."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        raise PostgresServerError(
            f"running as root, which PostgreSQL refuses, and there is no {SYSTEM_USER!r} "
            f"system user to run it as ({INSTALL_HINT} creates it)"
        ) from None


def _check_traversable(path: Path, user: pwd.struct_passwd) -> None:
    """Every folder above ``path`` must let ``user`` pass (search permission)."""
    for parent in path.resolve().parents:
        st = parent.stat()
        if st.st_uid == user.pw_uid:
            ok = bool(st.st_mode & stat.S_IXUSR)
        elif st.st_gid == user.pw_gid:
            ok = bool(st.st_mode & stat.S_IXGRP)
        else:
            ok = bool(st.st_mode & stat.S_IXOTH)
        if not ok:
            raise PostgresServerError(
                f"the {user.pw_name!r} user cannot enter {parent} "
                f"(mode {stat.filemode(st.st_mode)}), which holds the work directory "
                f"{path}: pick a work directory under /tmp (see make_workdir)"
            )


def _chown_tree(path: Path, user: pwd.struct_passwd) -> None:
    os.chown(path, user.pw_uid, user.pw_gid)
    for root, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            os.lchown(os.path.join(root, name), user.pw_uid, user.pw_gid)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.rstrip().splitlines()[-lines:]) or "(log is empty)"


def _child_setup(user: pwd.struct_passwd | None) -> Callable[[], None]:
    """What the server's child process does between fork and exec.

    Drops to ``user`` (if any), then asks the kernel for SIGQUIT when this
    thread dies; the order matters, since a change of user clears that request.
    """
    libc: ctypes.CDLL | None = None
    if sys.platform.startswith("linux"):
        name = ctypes.util.find_library("c")
        # Load libc before the fork: the child only makes system calls.
        libc = ctypes.CDLL(name, use_errno=True) if name else None
    parent = os.getpid()

    def setup() -> None:
        if user is not None:
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGQUIT)
            if os.getppid() != parent:  # the parent died before prctl took effect
                os.kill(os.getpid(), signal.SIGQUIT)

    return setup


def _env(user: pwd.struct_passwd | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    if user is not None:
        env.update(HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name)
    return env


# --------------------------------------------------------------------------
# The server


class PostgresServer:
    """One throwaway PostgreSQL cluster in ``workdir``, served on loopback.

    Layout of ``workdir``: ``data/`` (the cluster), ``run/`` (the unix
    socket), ``initdb.log`` and ``postgres.log``.

    Args:
        workdir: an empty or missing folder; when this process is root, every
            folder above it must be traversable by others (use
            :func:`make_workdir`).
        bin_dir: where ``initdb``, ``postgres`` and ``pg_isready`` are;
            default: :func:`find_bin_dir`.
        settings: extra server settings (``name -> value``), on top of
            ``fsync=off`` and friends.
        start_timeout: seconds to wait for the server to accept connections.

    Use as a context manager (the value is the DSN) or call :meth:`start` and
    :meth:`stop`.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        bin_dir: Path | None = None,
        settings: dict[str, str] | None = None,
        start_timeout: float = 30.0,
    ) -> None:
        self.workdir = Path(workdir)
        self._bin_dir = bin_dir
        self._settings = dict(settings or {})
        self._start_timeout = start_timeout
        self._popen: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.dsn = ""

    @property
    def data_dir(self) -> Path:
        """The cluster's data directory."""
        return self.workdir / "data"

    @property
    def socket_dir(self) -> Path:
        """Where the server's unix socket is."""
        return self.workdir / "run"

    @property
    def log_path(self) -> Path:
        """The server's log (stdout and stderr)."""
        return self.workdir / "postgres.log"

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> str:
        """Create the cluster and start the server; return its DSN.

        Returns:
            e.g. ``"postgresql://leasehold@127.0.0.1:54321/postgres"``
            (superuser, trust authentication, loopback only).

        Raises:
            PostgresServerError: the binaries are missing, this process is
                root without a ``postgres`` user, the work directory is not
                reachable for it, or ``initdb`` or the server failed (the
                message carries the tail of the log).
        """
        if self._popen is not None:
            return self.dsn
        bin_dir = self._bin_dir or find_bin_dir()
        user = _server_user()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if user is not None:
            _check_traversable(self.workdir, user)
            _chown_tree(self.workdir, user)
        self._initdb(bin_dir, user)
        self.socket_dir.mkdir(mode=0o755, exist_ok=True)
        if user is not None:
            os.chown(self.socket_dir, user.pw_uid, user.pw_gid)
        failure = ""
        for _ in range(_START_ATTEMPTS):
            port = free_port()
            failure = self._start_server(bin_dir, user, port)
            if not failure:
                self.port = port
                self.dsn = f"postgresql://{SUPERUSER}@127.0.0.1:{port}/{DATABASE}"
                return self.dsn
            if "could not bind" not in failure:  # another port won't help
                break
        raise PostgresServerError(failure)

    def _initdb(self, bin_dir: Path, user: pwd.struct_passwd | None) -> None:
        if (self.data_dir / "PG_VERSION").exists():
            return  # a cluster made by an earlier start()
        log = self.workdir / "initdb.log"
        args = [
            str(bin_dir / "initdb"),
            "--pgdata",
            str(self.data_dir),
            "--username",
            SUPERUSER,
            "--auth",
            "trust",
            "--encoding",
            "UTF8",
            "--locale",
            "C",
            "--no-sync",
        ]
        with log.open("wb") as out:
            if user is not None:
                os.chown(log, user.pw_uid, user.pw_gid)
            try:
                done = subprocess.run(
                    args,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=self.workdir,
                    env=_env(user),
                    preexec_fn=_child_setup(user),
                    timeout=120,
                    check=False,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                raise PostgresServerError(f"cannot run {args[0]}: {exc}") from exc
        if done.returncode != 0:
            raise PostgresServerError(
                f"initdb failed with exit code {done.returncode}"
                f"\n--- last lines of {log} ---\n{_tail(log)}"
            )

    def _server_args(self, bin_dir: Path, port: int) -> list[str]:
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(port),
            "unix_socket_directories": str(self.socket_dir),
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "200",
            **self._settings,
        }
        args = [str(bin_dir / "postgres"), "-D", str(self.data_dir)]
        for name, value in settings.items():
            args += ["-c", f"{name}={value}"]
        return args

    def _start_server(self, bin_dir: Path, user: pwd.struct_passwd | None, port: int) -> str:
        """Start the server on ``port``; return ``""`` or why it failed."""
        args = self._server_args(bin_dir, port)
        with self.log_path.open("ab") as out:
            try:
                popen = subprocess.Popen(
                    args,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=self.workdir,
                    env=_env(user),
                    start_new_session=True,
                    preexec_fn=_child_setup(user),
                )
            except OSError as exc:
                return f"cannot run {args[0]}: {exc}"
        deadline = time.monotonic() + self._start_timeout
        while time.monotonic() < deadline:
            code = popen.poll()
            if code is not None:
                return (
                    f"postgres exited with code {code} while starting on port {port}"
                    f"\n--- last lines of {self.log_path} ---\n{_tail(self.log_path)}"
                )
            if self._ready(bin_dir, port):
                self._popen = popen
                return ""
            time.sleep(0.1)
        _terminate(popen)
        return (
            f"postgres did not accept connections on 127.0.0.1:{port} within "
            f"{self._start_timeout:.0f} s\n--- last lines of {self.log_path} ---\n"
            f"{_tail(self.log_path)}"
        )

    def _ready(self, bin_dir: Path, port: int) -> bool:
        probe: Sequence[str] = [
            str(bin_dir / "pg_isready"),
            "--quiet",
            "--host=127.0.0.1",
            f"--port={port}",
            f"--username={SUPERUSER}",
            f"--dbname={DATABASE}",
            "--timeout=2",
        ]
        try:
            return subprocess.run(probe, check=False, timeout=10, env=_env(None)).returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False

    def stop(self) -> None:
        """Stop the server (fast shutdown: clients are disconnected). Idempotent.

        The work directory is left in place, logs included; remove it when
        done.
        """
        popen, self._popen = self._popen, None
        if popen is not None:
            _terminate(popen)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _terminate(popen: subprocess.Popen[bytes]) -> None:
    """SIGINT (fast shutdown), then SIGQUIT (immediate), then SIGKILL."""
    for sig, grace in ((signal.SIGINT, 15.0), (signal.SIGQUIT, 5.0), (signal.SIGKILL, 5.0)):
        if popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            popen.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=grace)
