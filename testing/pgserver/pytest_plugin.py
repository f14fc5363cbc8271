"""Pytest fixture for tests that need a real PostgreSQL server.

Register with ``pytest_plugins = ["pgserver.pytest_plugin"]`` or
``-p pgserver.pytest_plugin``. Fixture:

- ``postgres_dsn`` (session): the DSN of a server the tests may create
  tables in, as superuser. With ``LEASEHOLD_TEST_POSTGRES_DSN`` set, that
  server; otherwise a :class:`~pgserver.PostgresServer` started for the session
  in a fresh folder under the temp directory and removed at its end. A server
  that cannot start fails the tests, saying what is missing; it never skips
  them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from pgserver import PostgresServer, PostgresServerError, make_workdir

DSN_ENV = "LEASEHOLD_TEST_POSTGRES_DSN"


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """Give the DSN of the PostgreSQL server under test, starting one if needed.

    Yields:
        A libpq connection string (URL form when started here).
    """
    given = os.environ.get(DSN_ENV)
    if given:
        yield given
        return
    workdir = make_workdir()
    server = PostgresServer(workdir)
    try:
        dsn = server.start()
    except PostgresServerError as exc:
        server.stop()
        pytest.fail(
            f"no PostgreSQL server for the tests (set {DSN_ENV} to use one): {exc}"
            f"\n(work directory kept: {workdir})",
            pytrace=False,
        )
    try:
        yield dsn
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
