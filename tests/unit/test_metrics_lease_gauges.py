"""/metrics shows a per-lease gauge that only the shard workers measure (checkpoint age) with
its last sample while the lease is held; the supervisor's own view wins where it has one."""

from kcl_mp.metrics.catalogue import Recorder
from kcl_mp.metrics.process import Exporter

from .test_metrics import _Config, _scrape


def test_a_gauge_sampled_by_shard_workers_shows_its_last_value_while_the_lease_is_held():
    exporter = Exporter(_Config())  # type: ignore[arg-type]
    recorder = Recorder()
    recorder.add("checkpoint_age", 4.0, "s-1")
    recorder.add("checkpoint_age", 1.5, "s-1")
    recorder.add("checkpoint_age", 9.0, "s-2")
    recorder.add("millis_behind_latest", 70, "s-1")
    exporter.apply(recorder.drain(), {"millis_behind_latest": {"s-1": 50}}, {}, ["s-1", "s-2"], 1.0)
    shown = _scrape(exporter)
    assert shown[("kclmp_lease_checkpoint_age_seconds", (("shard", "s-1"),))] == 1.5
    assert shown[("kclmp_lease_checkpoint_age_seconds", (("shard", "s-2"),))] == 9.0
    assert shown[("kclmp_lease_millis_behind_latest", (("shard", "s-1"),))] == 50, "the supervisor's view"
    # a snapshot without a new sample keeps the last one; a lease no longer held goes
    exporter.apply(recorder.drain(), {}, {}, ["s-1"], 2.0)
    shown = _scrape(exporter)
    assert shown[("kclmp_lease_checkpoint_age_seconds", (("shard", "s-1"),))] == 1.5
    assert ("kclmp_lease_checkpoint_age_seconds", (("shard", "s-2"),)) not in shown
