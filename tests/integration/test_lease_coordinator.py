"""The lease coordinator's handoff bounds against a real moto server, on a fake clock:
an owner that never answers a handoff (a KCL 2.x-style worker) loses the lease after
gracefulLeaseHandoffTimeoutMillis; one that died mid-handoff, after failoverTimeMillis."""

from __future__ import annotations

import logging
import random

import pytest

from kcl_mp.config import load_config
from kcl_mp.lease import ExtendedSequenceNumber, Lease
from kcl_mp.lease_coordinator import LeaseCoordinator
from kcl_mp.lease_table import LeaseTable
from kcl_mp.logs import ShardLog

from .harness import base_properties, write_properties

pytestmark = pytest.mark.integration


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _coordinator(tmp_path, moto_url, dynamodb, app: str, clock: Clock) -> LeaseCoordinator:
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, "unused", app, "true", failoverTimeMillis=3000, gracefulLeaseHandoffTimeoutMillis=10000,
        workerId="thief"))
    config = load_config(props)
    table = LeaseTable(dynamodb, app)
    table.ensure_table()
    log = ShardLog(logging.getLogger("test"), "thief")
    return LeaseCoordinator(config, table, None, log, clock, random.Random(1))


def _seed(table: LeaseTable, owner: str, n: int) -> None:
    for i in range(n):
        key = f"shardId-{i:012d}"
        table.create_if_absent(Lease(key, checkpoint=ExtendedSequenceNumber("TRIM_HORIZON")))
        table.take(table.get(key), owner)


def _renew_as(table: LeaseTable, owner: str) -> None:
    """What a KCL 2.x worker does: bump its counters, blind to checkpointOwner."""
    for lease in table.list_leases():
        if lease.holder == owner:
            table.client.update_item(TableName=table.name, Key={"leaseKey": {"S": lease.key}},
                                     UpdateExpression="ADD leaseCounter :one",
                                     ExpressionAttributeValues={":one": {"N": "1"}})


@pytest.mark.parametrize("owner_alive", [True, False], ids=["owner-ignores-handoff", "owner-died"])
def test_a_handoff_nobody_finishes_ends_in_a_forced_take(tmp_path, moto_url, dynamodb, unique_name, owner_alive):
    clock = Clock()
    coordinator = _coordinator(tmp_path, moto_url, dynamodb, unique_name, clock)
    _seed(coordinator.table, "java-2x", 2)
    assert coordinator.scan() == ()  # first sight of java-2x's leases: assumed fresh, so a steal
    (key,) = coordinator.incoming
    asked = coordinator.table.get(key)
    assert (asked.owner, asked.checkpoint_owner) == ("thief", "java-2x")
    waited = 0.0
    acquired: tuple[str, ...] = ()
    for _ in range(30):  # renew rounds, 0.975 s apart on the fake clock
        clock.now += 0.975
        waited += 0.975
        if owner_alive:
            _renew_as(coordinator.table, "java-2x")
        acquired = coordinator.renew().acquired
        if acquired:
            break
    assert acquired == (key,)
    limit = 10.0 if owner_alive else 3.0  # gracefulLeaseHandoffTimeoutMillis, or failoverTimeMillis
    assert limit < waited <= limit + 2 * 0.975, waited
    final = coordinator.table.get(key)
    assert final.owner == "thief" and final.checkpoint_owner is None and key in coordinator.held


def test_the_owner_stops_for_a_handoff_and_finishes_it_by_the_timeout(tmp_path, moto_url, dynamodb, unique_name):
    clock = Clock()
    owner = _coordinator(tmp_path, moto_url, dynamodb, unique_name, clock)  # worker id "thief": here the owner
    _seed(owner.table, "thief", 1)
    owner.adopt_own_leases(owner.table.list_leases())
    (key,) = owner.held
    assert owner.table.handoff_start(owner.table.get(key), "other") is not None
    clock.now += 1.0
    first = owner.renew()
    assert first.handoffs == (key,) and not first.lost  # still held: its processor may checkpoint
    assert owner.table.checkpoint(key, "thief", ExtendedSequenceNumber("7")) is None
    clock.now += 1.0
    assert owner.renew().handoffs == ()  # asked once
    clock.now += 10.0  # the processor never answered: gracefulLeaseHandoffTimeoutMillis passed
    late = owner.renew()
    assert late.lost == (key,) and key not in owner.held
    final = owner.table.get(key)
    assert final.owner == "other" and final.checkpoint_owner is None
    assert final.checkpoint == ExtendedSequenceNumber("7")
