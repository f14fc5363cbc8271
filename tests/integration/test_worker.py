"""The worker SDK and ``leasehold run`` against a real API server.

Leases are taken away the way the operator does it (``reclaim`` of the exact
version judged, then another party's claim); network faults come from a real
TCP proxy between the wrapper and the API server.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import yaml
from kubernetes import client, config

from faultproxy import TcpProxy
from leasehold import worker
from leasehold.lease.protocol import Outcome, Rejection
from leasehold.lease.store import Accepted, LeaseStore
from leasehold.worker import LeaseLost, LossReason
from leasehold.worker import run as run_module
from leasehold.worker.run import KILL_ALLOWANCE_SECONDS
from localcluster.cluster import LocalCluster
from tests.integration.leases import count_requests

RUN = [sys.executable, "-m", "leasehold.cli", "run"]
"""``leasehold run`` as its own process, through the real command line."""


def take_away(store: LeaseStore, namespace: str, name: str, thief: str) -> float:
    """Reclaim the lease as the operator would, then claim it as ``thief``.

    Returns:
        Monotonic time right after the reclaim landed (the holder lost it then).
    """
    for _ in range(50):
        judged = store.get(namespace, name)
        if isinstance(store.reclaim(judged), Accepted):  # a renewal can land in between
            taken_at = time.monotonic()
            break
    else:
        raise AssertionError("could not reclaim the lease")
    assert isinstance(store.claim(namespace, name, thief), Accepted)
    return taken_at


class Noticed:
    def __init__(self) -> None:
        self.at: float | None = None
        self.loss: LeaseLost | None = None
        self.called = threading.Event()

    def __call__(self, loss: LeaseLost) -> None:
        self.at, self.loss = time.monotonic(), loss
        self.called.set()


def test_holder_keeps_a_2s_lease_for_6s(store: LeaseStore, namespace: str) -> None:
    store.create(namespace, "job", job_name="job", lease_duration_seconds=2)
    holder = worker.claim(namespace, "job", "worker-a", store=store)
    assert holder is not None and holder.token == 1
    renew_times = []
    end = time.monotonic() + 6
    while time.monotonic() < end:
        holder.check()
        renew_times.append(store.get(namespace, "job").record.renew_time)
        time.sleep(0.2)
    assert not holder.lost.is_set()
    distinct = sorted({t for t in renew_times if t is not None})
    assert len(distinct) >= 6, distinct  # every 0.67 s: about 9
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(distinct)]
    # Never near the 2 s the operator would wait (a renewal answered up to 0.8 s
    # late on a loaded machine is still in time).
    assert max(gaps) < 1.5, gaps
    assert isinstance(holder.release(), Accepted)
    lease = store.get(namespace, "job").record
    assert (lease.holder_identity, lease.fencing_token) == (None, 1)


def test_holder_notices_a_reclaim_within_one_renew_interval(
    store: LeaseStore, namespace: str
) -> None:
    store.create(namespace, "job", job_name="job", lease_duration_seconds=3)
    noticed = Noticed()
    holder = worker.claim(namespace, "job", "worker-a", store=store, on_lost=noticed)
    assert holder is not None
    interval = holder.timing.renew_interval_seconds  # 1 s
    time.sleep(0.3)
    taken_at = take_away(store, namespace, "job", "worker-b")
    assert noticed.called.wait(interval + 1.0)
    assert noticed.at is not None
    assert noticed.at - taken_at <= interval + 0.75  # the renewal's round trip, a busy machine
    with pytest.raises(LeaseLost) as raised:
        holder.check()
    assert raised.value.reason in (Rejection.STALE_TOKEN, Rejection.NOT_HOLDER)
    assert holder.lost.is_set()
    # The lost holder's completion is refused by the store.
    late = holder.complete(Outcome.SUCCEEDED)
    assert not isinstance(late, Accepted)
    assert store.get(namespace, "job").record.completion is None


def test_pull_mode_claim_then_second_claim_gets_none(store: LeaseStore, namespace: str) -> None:
    store.create(namespace, "job", job_name="job", lease_duration_seconds=10)
    first = worker.claim(namespace, "job", "pool-1", store=store)
    assert first is not None and first.token == 1
    assert worker.claim(namespace, "job", "pool-2", store=store) is None
    assert isinstance(first.complete(Outcome.SUCCEEDED), Accepted)
    assert worker.claim(namespace, "job", "pool-2", store=store) is None  # completed


def test_claim_any_skips_held_and_completed_leases(store: LeaseStore, namespace: str) -> None:
    for name in ("a-done", "b-held", "c-free"):
        store.create(
            namespace, name, job_name=name, lease_duration_seconds=10, labels={"pool": "x"}
        )
    store.create(namespace, "d-other", job_name="d-other", lease_duration_seconds=10)
    done = worker.claim(namespace, "a-done", "earlier", store=store)
    assert done is not None and isinstance(done.complete(Outcome.SUCCEEDED), Accepted)
    held = worker.claim(namespace, "b-held", "someone", store=store)
    assert held is not None
    try:
        mine = worker.claim_any(namespace, "pool-1", label_selector="pool=x", store=store)
        assert mine is not None and mine.lease_name == "c-free" and mine.token == 1
        assert worker.claim_any(namespace, "pool-2", label_selector="pool=x", store=store) is None
        mine.release()
    finally:
        held.release()


def test_claim_any_claims_a_listed_lease_with_one_write(
    api_client: client.ApiClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LeaseStore(api_client)
    for name in ("a-held", "b-free"):
        store.create(namespace, name, job_name=name, lease_duration_seconds=60)
    assert isinstance(store.claim(namespace, "a-held", "someone"), Accepted)
    # An unrelated write to the free lease (the operator's status): no conflict.
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        "leasehold.dev",
        "v1alpha1",
        namespace,
        "jobleases",
        "b-free",
        {"status": {"observedGeneration": 1}},
    )
    counts = count_requests(api_client, monkeypatch)
    mine = worker.claim_any(namespace, "pool-1", store=store)  # first renewal after 20 s
    assert mine is not None
    try:
        # The list (a GET of the collection), then the claim: one PATCH, no read.
        assert counts == Counter({"GET": 1, "PATCH": 1}), counts
        assert (mine.lease_name, mine.token) == ("b-free", 1)
    finally:
        mine.release()


# -- leasehold run -----------------------------------------------------------


def push_claim(store: LeaseStore, namespace: str, duration: int, holder: str = "pod-a") -> int:
    """Create a lease and claim it for ``holder``, as the operator does for a pod."""
    store.create(namespace, "job", job_name="job", lease_duration_seconds=duration)
    claimed = store.claim(namespace, "job", holder)
    assert isinstance(claimed, Accepted)
    return claimed.token


def run_env(kubeconfig: Path, namespace: str, token: int, duration: int) -> dict[str, str]:
    return {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "LEASEHOLD_NAMESPACE": namespace,
        "LEASEHOLD_JOB": "job",
        "LEASEHOLD_LEASE": "job",
        "LEASEHOLD_HOLDER": "pod-a",
        "LEASEHOLD_FENCING_TOKEN": str(token),
        "LEASEHOLD_LEASE_DURATION_SECONDS": str(duration),
    }


def _run_to_end(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``leasehold run -- sh -c script`` to its end (30 s at most), output captured."""
    return subprocess.run(
        [*RUN, "--", "sh", "-c", script], env=env, capture_output=True, text=True, timeout=30
    )


@pytest.mark.parametrize(
    ("script", "code", "outcome"),
    [
        ('test "$LEASEHOLD_FENCING_TOKEN" = 1 && exit 3', 3, Outcome.FAILED),
        ('test "$LEASEHOLD_FENCING_TOKEN" = 1', 0, Outcome.SUCCEEDED),
    ],
)
def test_run_records_the_commands_exit(
    store: LeaseStore,
    crds_installed: Path,
    namespace: str,
    script: str,
    code: int,
    outcome: Outcome,
) -> None:
    token = push_claim(store, namespace, 5)
    done = _run_to_end(script, run_env(crds_installed, namespace, token, 5))
    assert done.returncode == code, done.stderr
    lease = store.get(namespace, "job").record
    assert lease.completion is not None, done.stderr
    assert lease.completion.outcome == outcome
    assert lease.completion.exit_code == code
    assert lease.completion.message == f"exit code {code}"
    assert (lease.completion.fencing_token, lease.holder_identity) == (1, None)
    assert "completed lease" in done.stderr


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone, or going as it is read
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"  # a zombie no one reaped yet


def _wait_for_pid(pidfile: Path, proc: subprocess.Popen[str]) -> int:
    end = time.monotonic() + 20
    while time.monotonic() < end:
        if pidfile.exists() and pidfile.read_text().strip():
            return int(pidfile.read_text())
        if proc.poll() is not None:
            raise AssertionError(f"wrapper exited {proc.returncode}: {proc.communicate()[1]}")
        time.sleep(0.05)
    raise AssertionError("the command never started")


@pytest.fixture
def wrapper_procs() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _start(
    wrapper_procs: list[subprocess.Popen[str]], argv: list[str], env: dict[str, str]
) -> subprocess.Popen[str]:
    """Start ``argv`` (``leasehold run`` as :data:`RUN`, maybe wrapped) with its stderr piped.

    The process goes into ``wrapper_procs``, whose fixture kills it at
    teardown if the test left it running.
    """
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    wrapper_procs.append(proc)
    return proc


class DeathWatch:
    """Notes when process ``pid`` is gone (polled every 5 ms in a thread)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.gone_at: float | None = None
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            if _gone(self.pid):
                self.gone_at = time.monotonic()
                return
            time.sleep(0.005)

    def wait(self) -> float:
        self._thread.join(timeout=30)
        assert self.gone_at is not None, f"pid {self.pid} still alive"
        return self.gone_at


def _seconds(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    assert found, f"{pattern!r} not in:\n{text}"
    return float(found.group(1))


def test_run_kills_the_command_when_the_lease_is_taken(
    store: LeaseStore,
    crds_installed: Path,
    namespace: str,
    tmp_path: Path,
    wrapper_procs: list[subprocess.Popen[str]],
) -> None:
    duration = 6  # renew every 2 s, local window 4.8 s
    token = push_claim(store, namespace, duration)
    pidfile = tmp_path / "pid"
    proc = _start(
        wrapper_procs,
        [*RUN, "--grace-seconds", "3", "--", "sh", "-c", f'echo $$ > "{pidfile}"; exec sleep 60'],
        env=run_env(crds_installed, namespace, token, duration),
    )
    pid = _wait_for_pid(pidfile, proc)
    death = DeathWatch(pid)
    time.sleep(0.5)
    taken_at = take_away(store, namespace, "job", "thief")
    _, stderr = proc.communicate(timeout=15)
    exited_at = time.monotonic()
    assert proc.returncode == 75, stderr
    assert "lease lost: StaleToken" in stderr or "lease lost: NotHolder" in stderr, stderr
    dead_at = death.wait()
    # Noticed at the next renewal (<= 2 s), long before the local deadline.
    assert dead_at - taken_at <= 2.0 + 1.0, stderr
    before_deadline = _seconds(r"([-\d.]+) s before the local deadline", stderr)
    assert before_deadline >= 1.5, stderr
    print(
        f"\n[measure] lease taken away -> child dead {dead_at - taken_at:.3f} s,"
        f" wrapper exited {exited_at - taken_at:.3f} s;"
        f" child stopped {before_deadline:.3f} s before the wrapper's local deadline"
    )
    lease = store.get(namespace, "job").record
    assert (lease.holder_identity, lease.fencing_token, lease.completion) == ("thief", 2, None)


def _server_of(kubeconfig: Path) -> tuple[str, int]:
    """The API server (host, port) that ``kubeconfig`` points at."""
    server = urlsplit(yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"])
    assert server.hostname is not None and server.port is not None
    return server.hostname, server.port


def _proxied_kubeconfig(kubeconfig: Path, proxy: TcpProxy, out: Path) -> Path:
    """A copy of ``kubeconfig`` whose server is the proxy (TLS name kept)."""
    config = yaml.safe_load(kubeconfig.read_text())
    for entry in config["clusters"]:
        cluster = entry["cluster"]
        url = urlsplit(cluster["server"])
        assert url.hostname is not None
        cluster.setdefault("tls-server-name", url.hostname)
        cluster["server"] = urlunsplit(url._replace(netloc=proxy.url_host))
    out.write_text(yaml.safe_dump(config))
    return out


def test_run_kills_the_command_before_the_deadline_when_renewals_hang(
    store: LeaseStore,
    crds_installed: Path,
    namespace: str,
    tmp_path: Path,
    wrapper_procs: list[subprocess.Popen[str]],
) -> None:
    """The API server becomes unreachable: no answer, no rejection.

    The command ignores SIGTERM, so it dies by the SIGKILL that must come
    before the wrapper's local deadline (which itself ends before the
    operator would judge the lease expired).
    """
    duration = 6  # renew every 2 s, window 4.8 s, SIGTERM lead min(5, 1.4) s
    token = push_claim(store, namespace, duration)
    pidfile = tmp_path / "pid"
    with TcpProxy(*_server_of(crds_installed)) as proxy:
        kubeconfig = _proxied_kubeconfig(crds_installed, proxy, tmp_path / "kubeconfig")
        proc = _start(
            wrapper_procs,
            [*RUN, "--", "sh", "-c", f'trap "" TERM; echo $$ > "{pidfile}"; exec sleep 60'],
            env=run_env(kubeconfig, namespace, token, duration),
        )
        pid = _wait_for_pid(pidfile, proc)
        death = DeathWatch(pid)
        time.sleep(0.3)
        held_at = time.monotonic()
        proxy.hold()
        try:
            _, stderr = proc.communicate(timeout=15)
        finally:
            proxy.release()
        exited_at = time.monotonic()
    assert proc.returncode == 75, stderr
    assert "lease lost: no successful renewal" in stderr, stderr
    assert "after SIGKILL" in stderr, stderr  # it ignored SIGTERM
    dead_at = death.wait()
    before_deadline = _seconds(r"([-\d.]+) s before the local deadline", stderr)
    # Killed before the deadline, and not much earlier than the kill allowance says.
    assert 0 < before_deadline <= KILL_ALLOWANCE_SECONDS, stderr
    # The deadline counts from the start of the last renewal that got through,
    # at most 4.8 s before the hold; the operator would wait 6 s + its margin.
    assert dead_at - held_at < 4.8, stderr
    assert exited_at - held_at < 4.8 + 1.0, stderr  # + at most 1 s for a hung request
    print(
        f"\n[measure] API unreachable -> child dead {dead_at - held_at:.3f} s,"
        f" wrapper exited {exited_at - held_at:.3f} s;"
        f" child dead {before_deadline:.3f} s before the wrapper's local deadline"
    )
    # Nothing was written meanwhile: the lease is still pod-a's, not completed.
    lease = store.get(namespace, "job").record
    assert (lease.holder_identity, lease.completion) == ("pod-a", None)


def test_run_forwards_sigterm_and_releases_the_lease(
    store: LeaseStore,
    crds_installed: Path,
    namespace: str,
    tmp_path: Path,
    wrapper_procs: list[subprocess.Popen[str]],
) -> None:
    token = push_claim(store, namespace, 10)
    pidfile = tmp_path / "pid"
    proc = _start(
        wrapper_procs,
        [*RUN, "--", "sh", "-c", f'echo $$ > "{pidfile}"; exec sleep 60'],
        env=run_env(crds_installed, namespace, token, 10),
    )
    pid = _wait_for_pid(pidfile, proc)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=15)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert _gone(pid)
    lease = store.get(namespace, "job").record
    assert (lease.holder_identity, lease.fencing_token, lease.completion) == (None, 1, None)


def _wait_gone(pids: list[int], timeout: float) -> float | None:
    """Seconds until every pid is gone (or a zombie), ``None`` if not within ``timeout``."""
    start = time.monotonic()
    while not all(_gone(pid) for pid in pids):
        if time.monotonic() - start > timeout:
            return None
        time.sleep(0.005)
    return time.monotonic() - start


def _pids(path: Path, count: int, proc: subprocess.Popen[str]) -> list[int]:
    end = time.monotonic() + 20
    while time.monotonic() < end:
        lines = path.read_text().split() if path.exists() else []
        if len(lines) >= count:
            return [int(line) for line in lines[:count]]
        if proc.poll() is not None:
            raise AssertionError(f"wrapper exited {proc.returncode}: {proc.communicate()[1]}")
        time.sleep(0.02)
    raise AssertionError("the command never started its processes")


KILL_BOUND_SECONDS = 1.0
"""The command and its descendants are gone this soon after the wrapper is SIGKILLed."""


def test_a_sigkilled_wrapper_takes_the_command_and_its_grandchild_with_it(
    store: LeaseStore,
    crds_installed: Path,
    namespace: str,
    tmp_path: Path,
    wrapper_procs: list[subprocess.Popen[str]],
) -> None:
    """The pod runner SIGKILLs the wrapper: its child and a setsid grandchild die too.

    Both write to a target (one line per write, with the token); after the
    wrapper is killed and the next holder writes under token 2, no write
    under token 1 comes any more.
    """
    token = push_claim(store, namespace, 10)
    target, pids = tmp_path / "target", tmp_path / "pids"
    script, daemon = tmp_path / "work.sh", tmp_path / "daemon.sh"
    loop = 'while :; do echo "$LEASEHOLD_FENCING_TOKEN {who}" >> "{target}"; sleep 0.01; done'
    daemon.write_text(f'echo $$ >> "{pids}"\n{loop.format(who="gc", target=target)}\n')
    script.write_text(
        f'setsid sh "{daemon}" &\necho $$ >> "{pids}"\n{loop.format(who="child", target=target)}\n'
    )
    proc = _start(
        wrapper_procs,
        [*RUN, "--", "sh", str(script)],
        env=run_env(crds_installed, namespace, token, 10),
    )
    command_pids = _pids(pids, 2, proc)
    time.sleep(0.2)
    proc.kill()
    proc.wait()
    took = _wait_gone(command_pids, 5.0)
    left = [pid for pid in command_pids if not _gone(pid)]
    for pid in left:  # do not leak them into the next tests
        os.kill(pid, signal.SIGKILL)
    assert took is not None, f"still running after the wrapper was SIGKILLed: {left}"
    assert took <= KILL_BOUND_SECONDS, took
    seen = len(target.read_text().splitlines())
    # The next attempt: reclaimed, claimed under token 2, which writes. Until
    # then a fence could not refuse token 1; nothing comes under it any more.
    take_away(store, namespace, "job", "next-pod")
    with target.open("a") as out:
        out.write("2 next\n")
    time.sleep(0.5)
    lines = target.read_text().splitlines()
    assert lines[seen:] == ["2 next"], f"writes after the tree was gone: {lines[seen:]}"
    assert set(lines[:seen]) == {"1 child", "1 gc"}
    print(f"\n[measure] wrapper SIGKILLed -> command and grandchild gone in {took:.3f} s")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _run_gated_exit_0(
    store: LeaseStore,
    crds_installed: Path,
    namespace: str,
    tmp_path: Path,
    wrapper_procs: list[subprocess.Popen[str]],
) -> tuple[subprocess.Popen[str], int, Path]:
    """``leasehold run`` of a command that exits 0 once the returned path exists.

    Returns the wrapper process, the command's pid and the path to touch.
    """
    token = push_claim(store, namespace, 10)
    pidfile, go = tmp_path / "pid", tmp_path / "go"
    proc = _start(
        wrapper_procs,
        [
            *RUN,
            "--",
            "sh",
            "-c",
            f'echo $$ > "{pidfile}"; while [ ! -e "{go}" ]; do sleep 0.01; done; exit 0',
        ],
        env=run_env(crds_installed, namespace, token, 10),
    )
    return proc, _wait_for_pid(pidfile, proc), go


def test_a_sigterm_racing_a_successful_exit_records_the_success(
    store: LeaseStore,
    crds_installed: Path,
    namespace: str,
    tmp_path: Path,
    wrapper_procs: list[subprocess.Popen[str]],
) -> None:
    """The command exits 0; SIGTERM reaches the wrapper before it saw the exit.

    The wrapper is frozen while the command ends, then gets SIGTERM and
    SIGCONT: it must record the success, not release the lease.
    """
    proc, pid, go = _run_gated_exit_0(store, crds_installed, namespace, tmp_path, wrapper_procs)
    proc.send_signal(signal.SIGSTOP)
    try:
        go.touch()
        assert _wait_gone([pid], 5.0) is not None
        children = _children(proc.pid)
        assert children, "the wrapper has no child"
        # Everything below the wrapper has ended; it has not looked yet.
        assert _wait_gone(children, 5.0) is not None
        proc.send_signal(signal.SIGTERM)
    finally:
        proc.send_signal(signal.SIGCONT)
    _, stderr = proc.communicate(timeout=15)
    assert proc.returncode == 0, stderr
    lease = store.get(namespace, "job").record
    assert lease.completion is not None, stderr
    assert (lease.completion.outcome, lease.completion.exit_code) == (Outcome.SUCCEEDED, 0)
    assert "SIGTERM arrived after the command ended" in stderr, stderr


def _in_process_holder(store: LeaseStore, namespace: str) -> worker.LeaseHolder:
    """The holder of a freshly claimed 10 s lease, for ``run_command`` in this process."""
    token = push_claim(store, namespace, 10)
    environ = run_env(Path(), namespace, token, 10)  # the store is given: no kubeconfig read
    # run() forwards signals only from the main thread; a SIGTERM to this
    # process with no handler of its would end the test worker.
    assert threading.current_thread() is threading.main_thread()
    return worker.LeaseHolder.from_env(store=store, environ=environ)


def test_a_sigterm_while_the_command_starts_after_it_ended_records_the_success(
    store: LeaseStore,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """SIGTERM comes while the wrapper starts the command, after the command has ended.

    The wrapper can be descheduled (a loaded node, seen in CI) between
    starting the command and knowing it as its child: the command may end
    and a SIGTERM arrive there. The signal was never forwarded, so the
    command ended on its own: its success is recorded, not a release. The
    signal is sent at that instant from inside the real child's start.
    """
    holder = _in_process_holder(store, namespace)

    class EndedBeforeKnown(run_module._Child):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            deadline = time.monotonic() + 10
            while not self.command_ended() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert self.command_ended(), "the command did not end"
            os.kill(os.getpid(), signal.SIGTERM)  # handled before run() knows the child

    monkeypatch.setattr(run_module, "_Child", EndedBeforeKnown)
    with caplog.at_level("INFO", logger="leasehold"):
        code = run_module.run_command(["sh", "-c", "exit 0"], holder=holder)
    assert code == 0, caplog.text
    lease = store.get(namespace, "job").record
    assert lease.completion is not None, caplog.text
    assert (lease.completion.outcome, lease.completion.exit_code) == (Outcome.SUCCEEDED, 0)
    assert "forwarding SIGTERM" not in caplog.text


def test_a_sigterm_forwarded_just_after_the_start_is_a_stop_though_the_command_ended(
    store: LeaseStore,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """SIGTERM comes once the wrapper knows its child, and the command dies of it.

    The signal is forwarded at once; that the command has ended by the time
    the wrapper goes on does not make its end its own: the lease is released
    for the next attempt, nothing is recorded. The signal is sent as the
    wrapper logs the start, and the log call returns once the command died.
    """
    holder = _in_process_holder(store, namespace)
    info = run_module.log.info

    def signal_at_start(msg: str, *args: Any, **kwargs: Any) -> None:
        info(msg, *args, **kwargs)
        if msg.startswith("started"):
            os.kill(os.getpid(), signal.SIGTERM)  # handled here: the child is known
            assert _wait_gone([int(args[1])], 10.0) is not None, "the command did not end"

    monkeypatch.setattr(run_module.log, "info", signal_at_start)
    with caplog.at_level("INFO", logger="leasehold"):
        code = run_module.run_command(["sh", "-c", "sleep 30"], holder=holder)
    assert code == 128 + signal.SIGTERM, caplog.text
    assert "forwarding SIGTERM" in caplog.text
    lease = store.get(namespace, "job").record
    assert lease.completion is None, caplog.text
    assert lease.holder_identity is None, caplog.text  # released


def test_a_sigterm_after_the_command_ended_but_before_the_shim_did_records_the_success(
    store: LeaseStore,
    crds_installed: Path,
    namespace: str,
    tmp_path: Path,
    wrapper_procs: list[subprocess.Popen[str]],
) -> None:
    """The command exits 0; its shim has not exited yet (still sweeping) when SIGTERM comes.

    The shim is frozen so that the window is wide: the command's outcome
    stands, as when the signal comes after the shim exited.
    """
    proc, pid, go = _run_gated_exit_0(store, crds_installed, namespace, tmp_path, wrapper_procs)
    (shim,) = _children(proc.pid)
    os.kill(shim, signal.SIGSTOP)
    try:
        go.touch()
        assert _wait_gone([pid], 5.0) is not None  # a zombie: ended, not yet reaped
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)  # the wrapper handles it while the shim is still there
    finally:
        os.kill(shim, signal.SIGCONT)
    _, stderr = proc.communicate(timeout=15)
    lease = store.get(namespace, "job").record
    assert lease.completion is not None, stderr
    assert (lease.completion.outcome, lease.completion.exit_code) == (Outcome.SUCCEEDED, 0)
    assert proc.returncode == 0, stderr


def test_run_times_its_sigterm_lead_by_the_leases_own_duration(
    store: LeaseStore, crds_installed: Path, namespace: str
) -> None:
    """The pod was told 60 s, the lease lasts 6 s: a healthy command is not stopped.

    With the lead of a 60 s lease (5 s) against a 6 s lease's 4.8 s window the
    wrapper would stop the command at once.
    """
    token = push_claim(store, namespace, 6)
    done = _run_to_end("sleep 3; exit 0", run_env(crds_installed, namespace, token, 60))
    assert done.returncode == 0, done.stderr
    lease = store.get(namespace, "job").record
    assert lease.completion is not None, done.stderr
    assert lease.completion.outcome == Outcome.SUCCEEDED


def test_the_commands_own_exit_75_is_not_a_lost_lease(
    store: LeaseStore, crds_installed: Path, namespace: str
) -> None:
    token = push_claim(store, namespace, 5)
    done = _run_to_end("exit 75", run_env(crds_installed, namespace, token, 5))
    lease = store.get(namespace, "job").record
    assert lease.completion is not None, done.stderr
    assert (lease.completion.outcome, lease.completion.exit_code) == (Outcome.FAILED, 75)
    assert done.returncode == 1, done.stderr  # 75 would read as "lease lost"
    assert "lease lost" not in done.stderr, done.stderr


def test_a_command_that_exits_75_on_sigterm_is_not_a_lost_lease(
    store: LeaseStore,
    crds_installed: Path,
    namespace: str,
    tmp_path: Path,
    wrapper_procs: list[subprocess.Popen[str]],
) -> None:
    """The pod is stopped; the command answers SIGTERM with its own exit 75.

    The lease was held and is given back: the wrapper must not exit 75,
    which would say the lease was lost.
    """
    token = push_claim(store, namespace, 10)
    pidfile = tmp_path / "pid"
    proc = _start(
        wrapper_procs,
        [
            *RUN,
            "--",
            "sh",
            "-c",
            f'trap "exit 75" TERM; echo $$ > "{pidfile}"; while :; do sleep 0.01; done',
        ],
        env=run_env(crds_installed, namespace, token, 10),
    )
    _wait_for_pid(pidfile, proc)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=15)
    lease = store.get(namespace, "job").record
    assert (lease.holder_identity, lease.fencing_token, lease.completion) == (None, 1, None)
    assert proc.returncode == 1, stderr  # 75 would read as "lease lost"


def _caught_signals(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no SigCgt for {pid}")


def test_as_pid_1_a_sigterm_during_start_up_stops_the_wrapper(
    store: LeaseStore,
    crds_installed: Path,
    namespace: str,
    tmp_path: Path,
    wrapper_procs: list[subprocess.Popen[str]],
) -> None:
    """PID 1 of a PID namespace drops signals it has no handler for.

    The wrapper runs as PID 1 (``unshare --pid``) and its start is held up
    (the API server's traffic is held): SIGTERM must already be handled, and
    stop it without starting the command; the lease is given back.
    """
    token = push_claim(store, namespace, 10)
    started = tmp_path / "started"
    with TcpProxy(*_server_of(crds_installed)) as proxy:
        kubeconfig = _proxied_kubeconfig(crds_installed, proxy, tmp_path / "kubeconfig")
        proxy.hold()
        proc = _start(
            wrapper_procs,
            [
                "unshare",
                "--pid",
                "--fork",
                "--kill-child",
                *RUN,
                "--",
                "sh",
                "-c",
                f'touch "{started}"',
            ],
            env=run_env(kubeconfig, namespace, token, 10),
        )
        deadline = time.monotonic() + 10
        wrapper: int | None = None
        while time.monotonic() < deadline:
            children = _children(proc.pid)
            if children and "leasehold.cli" in Path(f"/proc/{children[0]}/cmdline").read_text():
                wrapper = children[0]
                # Handlers in place while the start is still held up.
                if _caught_signals(wrapper) & (1 << (signal.SIGTERM - 1)):
                    break
            time.sleep(0.01)
        else:
            raise AssertionError(f"no SIGTERM handler during start-up (wrapper pid {wrapper})")
        assert wrapper is not None
        time.sleep(0.3)  # well into the imports or the held first renewal
        os.kill(wrapper, signal.SIGTERM)
        time.sleep(0.2)
        proxy.release()
        _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert not started.exists(), "the command was started after SIGTERM"
    lease = store.get(namespace, "job").record
    assert (lease.holder_identity, lease.fencing_token, lease.completion) == (None, 1, None)


# -- a hung request is not a lost lease ----------------------------------------


def test_a_holder_whose_every_request_hangs_loses_the_lease_at_its_local_deadline(
    store: LeaseStore, crds_installed: Path, namespace: str, tmp_path: Path
) -> None:
    """Requests are retried on new connections while they hang, and the deadline still holds."""
    store.create(namespace, "job", job_name="job", lease_duration_seconds=6)
    with TcpProxy(*_server_of(crds_installed)) as proxy:
        kubeconfig = _proxied_kubeconfig(crds_installed, proxy, tmp_path / "kubeconfig")
        proxied = config.new_client_from_config(config_file=str(kubeconfig))
        noticed = Noticed()
        holder = worker.claim(
            namespace, "job", "worker-a", store=LeaseStore(proxied), on_lost=noticed
        )
        assert holder is not None
        try:
            # window 4.8 s, renew every 2 s, each request given up after 1 s
            assert holder.timing.request_timeout_seconds == pytest.approx(1.0)
            time.sleep(0.2)
            proxy.blackhole()
            blackholed_at, accepted = time.monotonic(), proxy.accepted
            deadline = holder.deadline
            assert deadline is not None
            assert noticed.called.wait(10)
            assert noticed.at is not None and noticed.loss is not None
            assert noticed.loss.reason is LossReason.DEADLINE_PASSED
            late = noticed.at - deadline
            assert 0 <= late < 1.0, late  # the holder's thread woken on a busy machine
            # The first renewal (2 s after the claim, on the pooled connection)
            # hung, was given up after 1 s and tried again on a new connection,
            # and so on until the deadline.
            tries = proxy.accepted - accepted
            assert tries >= 2, tries
            print(
                f"\n[measure] every request hangs: lease lost {late * 1000:.1f} ms after the"
                f" local deadline ({noticed.at - blackholed_at:.2f} s after the blackhole,"
                f" {tries} new connections tried)"
            )
        finally:
            holder.close()
            proxied.close()
    lease = store.get(namespace, "job").record
    assert lease.holder_identity == "worker-a"  # nothing else was written


def test_run_keeps_its_lease_through_a_rolling_api_server_restart(
    store: LeaseStore,
    crds_installed: Path,
    local_cluster: LocalCluster,
    namespace: str,
    tmp_path: Path,
    wrapper_procs: list[subprocess.Popen[str]],
) -> None:
    """Two API servers on one etcd behind a proxy (the load balancer); each restarts in turn.

    A restart leaves the clients' open connections half-open (the worst
    case: no FIN, no RST), so the renewal in flight hangs; new connections
    go to the other server. The child must not be killed, and its exit is
    recorded under the original token.
    """
    first = _server_of(crds_installed)
    second = ("127.0.0.1", local_cluster.add_apiserver())
    try:
        # Renew every 6.67 s, window 16 s, a new try beside a request unanswered
        # for 3.33 s. A renewal on a stranded connection uses its interval and
        # one timeout (10 s) before the try on a new connection: it has 6 s. At
        # duration 10 it had 3 s, which an API server on a machine at load 16
        # (CI: three control planes beside the kind tier) did not always meet.
        duration = 20
        token = push_claim(store, namespace, duration)
        with TcpProxy(*first) as proxy:
            kubeconfig = _proxied_kubeconfig(crds_installed, proxy, tmp_path / "kubeconfig")
            proc = _start(
                wrapper_procs,
                [*RUN, "--", "sh", "-c", "sleep 24"],
                env=run_env(kubeconfig, namespace, token, duration),
            )
            for server in (second, first, second):  # a restart every 7 s
                time.sleep(7)
                if proc.poll() is not None:
                    pytest.fail(f"the wrapper exited {proc.returncode}: {proc.communicate()[1]}")
                proxy.strand()
                proxy.retarget(*server)
            _, stderr = proc.communicate(timeout=30)
    finally:
        local_cluster.stop_component("kube-apiserver-2")
    assert proc.returncode == 0, stderr
    assert "lease lost" not in stderr, stderr
    hung = stderr.count("trying again beside it")
    assert hung >= 1, stderr  # at least one renewal hung and was tried again beside it
    lease = store.get(namespace, "job").record
    assert lease.completion is not None, stderr
    assert (lease.completion.outcome, lease.completion.fencing_token) == (Outcome.SUCCEEDED, token)
    print(f"\n[measure] rolling restart: {hung} renewal(s) hung and were retried, child kept")


POD_UID = "0a1b2c3d-0000-4000-8000-000000000001"
"""The pod UID the late claim binds (a UID's shape: the CRD checks it)."""


def test_run_waits_for_a_late_claim_by_reading_and_starts_after_one_refused_renewal(
    store: LeaseStore, crds_installed: Path, namespace: str
) -> None:
    """The pod starts before the operator's claim lands (the claim binds the pod's UID).

    The wrapper's first renewal is refused (``NOT_BOUND``); it then reads the
    lease until the claim has landed and confirms with one more renewal, so a
    claim landing 1.5 s late costs two renewals and some reads (each read a
    GET, no write), and the command starts soon after the claim. Before the
    reads, every try was a refused renewal (a PATCH and a GET) one retry
    interval (0.83 s for this lease) apart: three renewals here, and up to
    0.83 s after the claim before the start.
    """
    from leasehold.worker.startup import parse_line

    store.create(namespace, "job", job_name="job", lease_duration_seconds=10)
    env = {**run_env(crds_installed, namespace, 1, 10), "LEASEHOLD_POD_UID": POD_UID}
    with subprocess.Popen(
        [*RUN, "--", "sh", "-c", "date +%s.%N"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stderr is not None
        seen: list[str] = []
        for line in proc.stderr:  # the first renewal refused: the claim has not landed
            seen.append(line)
            if "not yet bound" in line:
                break
        else:
            raise AssertionError("".join(seen))
        time.sleep(1.5)
        claim_sent_at = time.time()
        claimed = store.claim(namespace, "job", "pod-a", holder_uid=POD_UID, token=1)
        assert isinstance(claimed, Accepted)
        out, err = proc.communicate(timeout=30)
        err = "".join(seen) + err
    assert proc.returncode == 0, err
    started = float(out.split()[0])
    values = parse_line(err)
    assert values is not None, err
    assert values["tries"] == 2, err  # one refused, the confirm; no refused retry
    assert values["reads"] >= 1, err
    # The command never starts before the claim has landed. (How soon after it
    # is a figure of bench/startup.py: a bound here failed on a loaded machine.)
    assert started > claim_sent_at, err
