"""The operator's object cache: newest version kept, copies handed out, silent until watched."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from leasehold import names
from leasehold.controller.act.context import index_lease_group
from leasehold.controller.engines.caches import ObjectCache, is_older
from leasehold.controller.engines.deadline import JobClocks
from leasehold.controller.engines.pods import PodMemory
from tests.unit.controller.attempt_pods import attempt_pod, pod


def body(name: str, version: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": name, "resourceVersion": version},
        "status": {"phase": phase},
    }


def test_a_cache_no_watch_feeds_answers_nothing() -> None:
    cache = ObjectCache()
    cache.put(body("a", "5"))
    assert cache.get("ns", "a") is None
    cache.watched = True
    assert cache.get("ns", "a") == body("a", "5")


def test_an_older_version_delivered_late_does_not_replace_a_newer_one() -> None:
    cache = ObjectCache()
    cache.watched = True
    cache.put(body("a", "12", "Succeeded"))  # an own write's answer
    cache.put(body("a", "9", "Running"))  # the watch's event of an earlier version
    assert cache.get("ns", "a") == body("a", "12", "Succeeded")
    cache.put(body("a", "13", "Failed"))
    assert cache.get("ns", "a") == body("a", "13", "Failed")


def test_versions_are_compared_only_when_both_are_integers() -> None:
    assert is_older("9", "12")
    assert not is_older("12", "9")
    assert not is_older("x9", "12")
    assert not is_older("9", "")


def test_the_caller_may_change_what_it_got() -> None:
    cache = ObjectCache()
    cache.watched = True
    given = body("a", "1")
    cache.put(given)
    given["status"]["phase"] = "Changed after put"
    got = cache.get("ns", "a")
    assert got is not None and got["status"]["phase"] == "Running"
    got["status"]["phase"] = "Changed after get"
    again = cache.get("ns", "a")
    assert again is not None and again["status"]["phase"] == "Running"


def test_a_dropped_object_is_a_miss() -> None:
    cache = ObjectCache()
    cache.watched = True
    cache.put(body("a", "1"))
    cache.drop("ns", "a")
    assert cache.get("ns", "a") is None


def test_job_clocks_know_a_job_once_anchored_and_only_that_incarnation() -> None:
    now = [100.0]
    clocks = JobClocks(lambda: now[0])
    assert not clocks.knows("ns/a", "uid-1")
    clocks.elapsed_seconds("ns/a", "uid-1", datetime(2026, 1, 1, tzinfo=UTC), None)
    assert clocks.knows("ns/a", "uid-1")
    assert not clocks.knows("ns/a", "uid-2")


def test_pod_memory_ignores_a_pod_no_leased_job_controls() -> None:
    memory = PodMemory()
    memory.fed = True
    memory.observe(pod("a", 1))
    intruder = pod("a", 1)
    del intruder["metadata"]["ownerReferences"]
    assert not memory.observe({**intruder, "metadata": {**intruder["metadata"], "uid": "x"}})
    assert [f.owner_uid for f in memory.recall("ns", "a").values()] == ["job-uid"]


def test_pod_memory_says_when_no_pod_below_a_token_can_exist() -> None:
    memory = PodMemory()
    memory.observe(pod("a", 1))
    assert memory.may_have_below("ns", "a", 1)  # no pod watch feeds it: list
    memory.fed = True
    assert not memory.may_have_below("ns", "a", 1)  # the first attempt: nothing stale
    assert memory.may_have_below("ns", "a", 2)
    for token in range(2, 7):
        memory.observe(pod("a", token))
    # Tokens 1 and 2 were forgotten (only the last few are kept): they may still exist.
    assert memory.may_have_below("ns", "a", 3)
    memory.forget("ns", "a")
    assert not memory.may_have_below("ns", "a", 7)


def test_a_write_answer_arriving_after_the_deletion_does_not_bring_the_object_back() -> None:
    cache = ObjectCache()
    cache.watched = True
    cache.put(body("a", "12"))
    cache.drop("ns", "a", deleted_version="14")  # the DELETED event
    cache.put(body("a", "13"))  # a status write's answer, delivered late
    assert cache.get("ns", "a") is None
    cache.put(body("a", "14"))
    assert cache.get("ns", "a") is None
    cache.put(body("a", "20"))  # created again under the same name
    assert cache.get("ns", "a") == body("a", "20")
    cache.put(body("a", "13"))  # the old tombstone is gone, and 20 is newer anyway
    assert cache.get("ns", "a") == body("a", "20")


def index_lease(name: str, version: str, job: str | None, index: str | None) -> dict[str, Any]:
    labels = {names.LABEL_JOB: job} if job is not None else {}
    if index is not None:
        labels[names.LABEL_COMPLETION_INDEX] = index
    return {
        "metadata": {"namespace": "ns", "name": name, "resourceVersion": version, "labels": labels},
        "spec": {"jobName": job},
    }


def grouped() -> ObjectCache:
    cache = ObjectCache(group_of=index_lease_group)
    cache.watched = True
    return cache


def names_of(found: Any) -> set[str]:
    return {b["metadata"]["name"] for b in found or []}


def test_a_jobs_index_leases_are_found_without_its_own_lease_or_others() -> None:
    cache = grouped()
    cache.put(index_lease("big.0", "1", "big", "0"))
    cache.put(index_lease("big.1", "2", "big", "1"))
    cache.put(index_lease("big", "3", "big", None))  # the job's own lease: no index
    cache.put(index_lease("other.0", "4", "other", "0"))
    assert names_of(cache.members("ns", "big")) == {"big.0", "big.1"}
    assert names_of(cache.members("ns", "other")) == {"other.0"}
    assert cache.members("elsewhere", "big") == []


def test_a_group_answers_nothing_until_watched_as_get_does() -> None:
    cache = ObjectCache(group_of=index_lease_group)
    cache.put(index_lease("big.0", "1", "big", "0"))
    assert cache.members("ns", "big") is None  # the caller LISTs instead
    cache.watched = True
    assert names_of(cache.members("ns", "big")) == {"big.0"}


def test_a_group_keeps_the_newest_version_and_forgets_a_deleted_lease() -> None:
    cache = grouped()
    cache.put(index_lease("big.0", "7", "big", "0"))
    cache.put(index_lease("big.0", "5", "big", "0"))  # late, older: refused
    assert [b["metadata"]["resourceVersion"] for b in cache.members("ns", "big") or []] == ["7"]
    cache.drop("ns", "big.0", deleted_version="8")
    assert cache.members("ns", "big") == []
    cache.put(index_lease("big.0", "7", "big", "0"))  # a write's answer after the deletion
    assert cache.members("ns", "big") == []
    cache.put(index_lease("big.0", "9", "big", "0"))  # created again since
    assert names_of(cache.members("ns", "big")) == {"big.0"}


def test_a_body_whose_labels_change_moves_to_its_new_group() -> None:
    cache = grouped()
    cache.put(index_lease("x.0", "1", "a", "0"))
    cache.put(index_lease("x.0", "2", "b", "0"))
    assert cache.members("ns", "a") == []
    assert names_of(cache.members("ns", "b")) == {"x.0"}
    cache.put(index_lease("x.0", "3", "b", None))  # no longer an index lease
    assert cache.members("ns", "b") == []


def test_pod_memory_counts_a_jobs_pods_left_over_every_index_until_each_ends() -> None:
    memory = PodMemory()
    memory.observe(attempt_pod("a", 1, "Running", index=0))
    assert memory.left("ns", "a", owner_uid="job-uid") is None  # no pod watch feeds it: list
    memory.fed = True
    memory.observe(attempt_pod("a", 1, "Pending", index=1))
    memory.observe(attempt_pod("a", 1, "Running", owner="an-earlier-incarnation"))
    memory.observe(attempt_pod("b", 1, "Running"))
    assert memory.left("ns", "a", owner_uid="job-uid") == 2
    memory.observe(attempt_pod("a", 1, "Succeeded", index=0))
    assert memory.left("ns", "a", owner_uid="job-uid") == 1
    deleting = attempt_pod("a", 1, "Running", index=1)
    deleting["metadata"]["deletionTimestamp"] = "2026-12-05T17:00:00Z"
    memory.observe(deleting)
    assert memory.left("ns", "a", owner_uid="job-uid") == 1  # being deleted still counts
    memory.observe(deleting, gone=True)
    assert memory.left("ns", "a", owner_uid="job-uid") == 0
    for token in range(2, 7):  # index 0's token 1 is forgotten: the memory cannot tell
        memory.observe(attempt_pod("a", token, "Succeeded", index=0))
    assert memory.left("ns", "a", owner_uid="job-uid") is None


def test_pod_memory_never_takes_a_pods_end_back() -> None:
    memory = PodMemory()
    memory.fed = True
    assert memory.observe(attempt_pod("a", 1, "Succeeded", uid="p1"))
    # A list answered before the Succeeded event was kept: its Running is older.
    assert not memory.observe(attempt_pod("a", 1, "Running", uid="p1"))
    assert memory.left("ns", "a", owner_uid="job-uid") == 0
    assert memory.recall("ns", "a")[1].phase == "Succeeded"
    # Another pod under the same token (made again after a deletion) is its own.
    assert memory.observe(attempt_pod("a", 1, "Running", uid="p2"))
    assert memory.left("ns", "a", owner_uid="job-uid") == 1


def test_pod_memory_never_takes_a_pods_deletion_back() -> None:
    memory = PodMemory()
    memory.fed = True
    deleting = attempt_pod("a", 1, "Running", uid="p1")
    deleting["metadata"]["deletionTimestamp"] = "2026-12-05T17:00:00Z"
    memory.observe(deleting)
    memory.observe(attempt_pod("a", 1, "Running", uid="p1"))  # a list older than the event
    assert memory.recall("ns", "a")[1].terminating
    memory.observe(attempt_pod("a", 1, "Failed", uid="p1"), gone=True)  # the DELETED event
    memory.observe(attempt_pod("a", 1, "Failed", uid="p1"))  # a list older than that
    assert memory.recall("ns", "a")[1].gone
