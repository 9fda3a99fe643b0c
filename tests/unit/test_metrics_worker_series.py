"""Per-worker series are bounded however many distinct leaseOwner strings the table holds:
this worker and the most loaded keep their own, the rest are one "(other workers)" series,
on /metrics and in CloudWatch alike, with nothing lost from the totals."""

from kcl_mp.metrics.catalogue import MAX_WORKER_SERIES, OTHER_WORKERS, CloudWatchBuffer, Recorder, named_workers
from kcl_mp.metrics.process import Exporter

from .test_metrics import _Config, _scrape

OWNERS = {f"owner-{n:04d}": n % 7 for n in range(1000)}  # 1,000 distinct leaseOwner strings written into a table


def test_this_worker_and_the_most_loaded_are_named_ties_by_name():
    named = named_workers({**OWNERS, "w-1": 0}, "w-1")
    assert len(named) == MAX_WORKER_SERIES and "w-1" in named
    assert all(OWNERS[w] == 6 for w in named - {"w-1"})  # only the most loaded, 6 leases each
    assert sorted(named - {"w-1"}) == sorted(w for w in OWNERS if OWNERS[w] == 6)[:MAX_WORKER_SERIES - 1]
    assert named_workers({"a": 1, "w-1": 2}, "w-1") == {"a", "w-1"}  # under the cap: all


def test_prometheus_shows_at_most_the_cap_plus_other_and_the_same_total():
    exporter = Exporter(_Config())  # type: ignore[arg-type]
    owners = {**OWNERS, "w-1": 3}
    exporter.apply({}, {"worker_leases": owners, "workers": {"": len(owners)}}, {}, [], 1.0)
    shown = {labels: value for (name, labels), value in _scrape(exporter).items() if name == "kclmp_worker_leases"}
    assert len(shown) == MAX_WORKER_SERIES + 1
    assert shown[(("worker", "w-1"),)] == 3 and (("worker", OTHER_WORKERS),) in shown
    assert sum(shown.values()) == sum(owners.values())


def test_cloudwatch_gets_at_most_the_cap_plus_other_with_every_lease_counted():
    recorder = Recorder()
    for owner, count in {**OWNERS, "w-1": 3}.items():
        recorder.add("worker_leases", count, owner)
    buffer = CloudWatchBuffer("w-1", "DETAILED", ("ALL",), 10.0, 100_000)
    buffer.add(recorder.drain(), 0.0)
    _, taken = buffer.take()
    workers = {dict(dims)["WorkerIdentifier"]: stat for (name, _, dims), stat in taken.items()
               if name == "WorkerLeases"}
    assert len(workers) == MAX_WORKER_SERIES + 1 and workers["w-1"].total == 3
    assert workers[OTHER_WORKERS].count == 1001 - MAX_WORKER_SERIES  # SampleCount: how many were merged
    assert sum(stat.total for stat in workers.values()) == sum(OWNERS.values()) + 3
