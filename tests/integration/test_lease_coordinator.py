"""The lease coordinator's handoff bounds against a real moto server, on a fake clock:
an owner that never answers a handoff (a KCL 2.x-style worker) loses the lease after
gracefulLeaseHandoffTimeoutMillis; one that died mid-handoff, after failoverTimeMillis;
one never seen checkpointing that renews without answering (a Java 3.x worker asked
before its consumer started), after failoverTimeMillis. A lease that reaches SHARD_END
between the thief's scan and its write is neither asked for nor taken: the races are
set up by writing the shard end from another client just before the thief's request
leaves (botocore's before-parameter-build event)."""

from __future__ import annotations

import logging
import random

import boto3
import pytest

from kcl_mp.config import load_config
from kcl_mp.leases.lease import Lease
from kcl_mp.leases.table import LeaseTable
from kcl_mp.logs import ShardLog
from kcl_mp.sequence import SHARD_END, ExtendedSequenceNumber
from kcl_mp.supervisor.coordinator import LeaseCoordinator

from ..support.clock import Clock
from ..support.harness import base_properties, write_properties

pytestmark = pytest.mark.integration


def _coordinator(tmp_path, moto_url, dynamodb, app: str, clock: Clock, **more: object) -> LeaseCoordinator:
    props = write_properties(tmp_path / "app.properties", **base_properties(
        moto_url, "unused", app, "true", failoverTimeMillis=3000, gracefulLeaseHandoffTimeoutMillis=10000,
        workerId="thief", **more))
    config = load_config(props)
    table = LeaseTable(dynamodb, app)
    table.ensure_table()
    log = ShardLog(logging.getLogger("test"), "thief")
    coordinator = LeaseCoordinator(config, table, None, log, clock, random.Random(1))
    coordinator.join_fleet()  # as the supervisor's start-up: the client version, before any scan
    return coordinator


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


def _checkpoint_as(table: LeaseTable, owner: str, position: str) -> None:
    """The owner's processors checkpoint every lease it holds."""
    for lease in table.list_leases():
        if lease.holder == owner:
            assert table.checkpoint(lease.key, owner, ExtendedSequenceNumber(position)) is None


def _steal_one_processed(coordinator: LeaseCoordinator, clock: Clock, owner: str) -> str:
    """The thief's first scan only sees ``owner``'s leases (not started: the steal waits);
    once their checkpoints moved under ``owner``, the next scan asks for one."""
    assert coordinator.scan() == () and not coordinator.handoffs.incoming
    _checkpoint_as(coordinator.table, owner, "5")
    _renew_as(coordinator.table, owner)
    clock.now += 1.0
    assert coordinator.scan() == ()
    (key,) = coordinator.handoffs.incoming
    return key


def _before_update(client, prefix: str, action) -> list[str]:
    """Run ``action(key)`` once, just before ``client`` sends an UpdateItem whose update
    expression starts with ``prefix``; the keys it ran for."""
    ran: list[str] = []

    def hook(params, **_):
        if not ran and params.get("UpdateExpression", "").startswith(prefix):
            ran.append(params["Key"]["leaseKey"]["S"])
            action(ran[0])

    client.meta.events.register("before-parameter-build.dynamodb.UpdateItem", hook)
    return ran


@pytest.mark.parametrize("owner_alive", [True, False], ids=["owner-ignores-handoff", "owner-died"])
def test_a_handoff_nobody_finishes_ends_in_a_forced_take(tmp_path, moto_url, dynamodb, unique_name, owner_alive):
    clock = Clock()
    coordinator = _coordinator(tmp_path, moto_url, dynamodb, unique_name, clock)
    _seed(coordinator.table, "java-2x", 2)
    key = _steal_one_processed(coordinator, clock, "java-2x")
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


@pytest.mark.parametrize("completing", [False, True], ids=["owner-silent", "owner-checkpoints"])
def test_a_handoff_asked_of_an_owner_never_seen_checkpointing(tmp_path, moto_url, dynamodb, unique_name, completing):
    """Its leases start by being held for failoverTimeMillis (an idle shard). Silent after the
    request (renewing, but no checkpoint and no handover for failoverTimeMillis): taken
    then, not after the timeout. Checkpointing after it: the owner is completing, the
    timeout stands."""
    clock = Clock()
    coordinator = _coordinator(tmp_path, moto_url, dynamodb, unique_name, clock)
    _seed(coordinator.table, "java-3x", 2)
    assert coordinator.scan() == () and not coordinator.handoffs.incoming  # first sight: not started
    clock.now += 3.1  # failoverTimeMillis 3000, java-3x renewing all along
    _renew_as(coordinator.table, "java-3x")
    assert coordinator.scan() == ()
    ((key, waiting),) = coordinator.handoffs.incoming.items()
    assert not waiting.seen_checkpointing
    waited = 0.0
    acquired: tuple[str, ...] = ()
    for round_ in range(30):
        clock.now += 0.975
        waited += 0.975
        _renew_as(coordinator.table, "java-3x")
        if completing and round_ == 0:  # its processor got shutdownRequested and checkpoints
            assert coordinator.table.checkpoint(key, "java-3x", ExtendedSequenceNumber("9")) is None
        acquired = coordinator.renew().acquired
        if acquired:
            break
    assert acquired == (key,)
    if completing:
        assert 10.0 < waited <= 10.0 + 2 * 0.975, waited  # gracefulLeaseHandoffTimeoutMillis
    else:
        assert 3.0 < waited <= 3.0 + 2 * 0.975, waited  # failoverTimeMillis, renewed all along
    final = coordinator.table.get(key)
    assert final.owner == "thief" and final.checkpoint_owner is None and key in coordinator.held


def test_a_steal_racing_a_shard_end_asks_for_nothing(tmp_path, moto_url, dynamodb, unique_name):
    """The thief's scan saw the lease open; the owner checkpoints SHARD_END just before the
    thief's handoff request reaches the table: the request is refused, nothing is asked."""
    clock = Clock()
    coordinator = _coordinator(tmp_path, moto_url, dynamodb, unique_name, clock)
    owner = LeaseTable(boto3.client("dynamodb", endpoint_url=moto_url, region_name="us-east-1"), unique_name)
    _seed(owner, "host-b", 2)
    assert coordinator.scan() == ()  # first sight: nothing started yet
    _checkpoint_as(owner, "host-b", "5")
    _renew_as(owner, "host-b")
    clock.now += 1.0
    ended = _before_update(dynamodb, "SET #o = :me, #co = :old",  # the handoff start
                           lambda key: owner.checkpoint(key, "host-b", ExtendedSequenceNumber(SHARD_END)))
    assert coordinator.scan() == ()
    (key,) = ended
    assert not coordinator.handoffs.incoming and key not in coordinator.held
    after = owner.get(key)
    end = ExtendedSequenceNumber(SHARD_END)
    assert (after.owner, after.checkpoint_owner, after.checkpoint) == ("host-b", None, end)
    for _ in range(3):  # later rounds neither ask for it nor take it: it is finished
        clock.now += 3.1
        _renew_as(owner, "host-b")
        assert coordinator.scan() == () and coordinator.renew().acquired == ()
        assert key not in coordinator.handoffs.incoming and key not in coordinator.held
    assert owner.get(key).owner == "host-b"


def test_a_forced_take_racing_a_shard_end_takes_nothing(tmp_path, moto_url, dynamodb, unique_name):
    """A handoff is under way; the owner never answers; as the thief's forced take (after
    gracefulLeaseHandoffTimeoutMillis) leaves, the owner's processor checkpoints SHARD_END:
    the take is refused, the handoff is dropped, no processor would start (nothing held)."""
    clock = Clock()
    coordinator = _coordinator(tmp_path, moto_url, dynamodb, unique_name, clock)
    owner = LeaseTable(boto3.client("dynamodb", endpoint_url=moto_url, region_name="us-east-1"), unique_name)
    _seed(owner, "host-b", 2)
    key = _steal_one_processed(coordinator, clock, "host-b")
    ended = _before_update(dynamodb, "SET #o = :me, #c = :next",  # the take
                           lambda k: owner.checkpoint(k, "host-b", ExtendedSequenceNumber(SHARD_END)))
    seen: list[tuple[str, ...]] = []
    for _ in range(16):  # renew rounds past the 10 s timeout; host-b renews until its shard ends
        clock.now += 0.975
        if not ended:
            _renew_as(owner, "host-b")
        seen.append(coordinator.renew().acquired)
        if ended and key not in coordinator.handoffs.incoming:
            break
    assert ended == [key] and seen and not any(seen), seen
    assert key not in coordinator.handoffs.incoming and key not in coordinator.held
    after = owner.get(key)
    end = ExtendedSequenceNumber(SHARD_END)
    assert (after.owner, after.checkpoint_owner, after.checkpoint) == ("thief", "host-b", end)


def test_a_handoff_whose_lease_reaches_shard_end_is_dropped(tmp_path, moto_url, dynamodb, unique_name):
    """The owner's processor reached the shard's end during the handoff and its host stopped
    renewing: the thief does not take the lease when it looks stalled; it drops the handoff."""
    clock = Clock()
    coordinator = _coordinator(tmp_path, moto_url, dynamodb, unique_name, clock)
    _seed(coordinator.table, "host-b", 2)
    key = _steal_one_processed(coordinator, clock, "host-b")
    assert coordinator.table.checkpoint(key, "host-b", ExtendedSequenceNumber(SHARD_END)) is None
    for _ in range(6):  # past failoverTimeMillis: the owner stopped renewing
        clock.now += 0.975
        assert coordinator.renew().acquired == ()
    assert key not in coordinator.handoffs.incoming and key not in coordinator.held
    assert coordinator.table.get(key).checkpoint_owner == "host-b"


def test_a_leader_holds_what_it_assigns_itself_without_a_second_write(tmp_path, moto_url, dynamodb, unique_name):
    """The 3.x leader's take of a lease for itself set the owner and moved the counter, as a
    renewal does: it holds the lease as written and renews it in the next round, as Java's
    DynamoDBLeaseDiscoverer hands an assigned lease to the renewer without a write."""
    clock = Clock()
    coordinator = _coordinator(tmp_path, moto_url, dynamodb, unique_name, clock,
                               clientVersionConfig="CLIENT_VERSION_CONFIG_3X")
    key = "shardId-000000000000"
    coordinator.table.create_if_absent(Lease(key, checkpoint=ExtendedSequenceNumber("TRIM_HORIZON")))
    assert coordinator.fleet.is_leader()  # alone: elected at start-up
    writes: list[str] = []
    dynamodb.meta.events.register("before-parameter-build.dynamodb.UpdateItem", lambda params, **_: writes.append(
        params["UpdateExpression"]) if params["Key"].get("leaseKey") == {"S": key} else None)
    assert coordinator.scan() == (key,)
    assert writes == ["SET #o = :me, #c = :next REMOVE #co"]  # the take, and no renewal after it
    lease = coordinator.table.get(key)
    assert (lease.owner, lease.counter) == ("thief", 1) and coordinator.held[key].lease == lease
    assert coordinator.held[key].renewed_at == clock.now  # no later than the take was sent
    clock.now += 1.0
    assert coordinator.renew().lost == () and coordinator.table.get(key).counter == 2
