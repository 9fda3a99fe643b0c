"""The DynamoDB lease table: every read and conditional write kcl-mp makes.

Conditions sent (``:me`` is this worker's id, ``:c`` the counter last seen; "holds"
below is ``(leaseOwner = :me AND attribute_not_exists(checkpointOwner)) OR
checkpointOwner = :me``: the KCL 3.x rule that, during a handoff, the old owner named in
checkpointOwner still holds the lease; "open" is ``attribute_not_exists(checkpoint) OR
checkpoint <> SHARD_END``: a finished lease is never taken, asked for or checkpointed;
each write is also conditioned on the item being a lease, as the paragraph after the list says):

    create          PutItem     attribute_not_exists(leaseKey)
                                (the item with entityType LEASE, as Java 3.5 creates it)
    take            UpdateItem  leaseCounter = :c AND open
                                SET leaseOwner = :me, leaseCounter = :c + 1
                                [ADD ownerSwitchesSinceCheckpoint 1 when the owner changes]
                                REMOVE checkpointOwner
    renew           UpdateItem  leaseCounter = :c AND holds
                                SET leaseCounter = :c + 1 [, throughputKBps = :kbps (KCL 3.x)]
    handoff start   UpdateItem  leaseOwner = :old AND attribute_not_exists(checkpointOwner)
                                AND open
                                SET leaseOwner = :me, checkpointOwner = :old
    handoff finish  UpdateItem  checkpointOwner = :me          (the old owner, when done)
                                REMOVE checkpointOwner  ADD leaseCounter 1
    handoff cancel  UpdateItem  leaseOwner = :me AND checkpointOwner = :old
                                SET leaseOwner = :old  REMOVE checkpointOwner
    release         UpdateItem  leaseOwner = :me AND attribute_not_exists(checkpointOwner)
                                REMOVE leaseOwner  ADD leaseCounter 1
    give up         UpdateItem  as release, and SET kclmpReleasedBy = :me,
                                kclmpReleasedUntilMillis = :until (kcl-mp's own attributes:
                                the 3.x leader assigns it to another worker until then)
    checkpoint      UpdateItem  holds AND open
                                SET checkpoint, checkpointSubSequenceNumber,
                                ownerSwitchesSinceCheckpoint = 0
                                REMOVE pendingCheckpoint, pendingCheckpointSubSequenceNumber,
                                pendingCheckpointState
    children        UpdateItem  (only the prefix below)
                                ADD childShardIds :children
    delete          DeleteItem  checkpoint = SHARD_END           (a finished lease)
    delete former   DeleteItem  (only the prefix below)          (a lease of a former stream:
                                                                 leases.stream_changes)

Every write but create is also conditioned on the item being a lease (``lease.not_a_lease``,
as far as a condition can say it), so no write of kcl-mp can alter a row KCL 3.5 keeps
beside the leases (``leases.rows``): the checkpoint and the delete prefix their condition
with ``is a lease AND``, every other UpdateItem with ``attribute_exists(leaseKey) AND is a
lease AND``, where "is a lease" is ``attribute_type(leaseCounter, N) AND
(attribute_not_exists(entityType) OR entityType = LEASE)``. Create needs no such condition:
``attribute_not_exists(leaseKey)`` holds for no existing row. Reads split the same way: a
scan returns the leases and the other rows apart, and ``get`` reads a row that is not a
lease as no lease.

These are the Java KCL's writes (DynamoDBLeaseRefresher / DynamoDBLeaseSerializer; the
handoff ones are KCL 3.x's initiateGracefulLeaseHandoff and evictLease), so Java workers
and kcl-mp workers can share one table; only "open" in take and handoff start is kcl-mp's
own (a Java worker does not check it). The handoff start does not bump the counter, so
the old owner keeps renewing (nobody sees the lease expire) until it has checkpointed.
UpdateItem never touches attributes it does not name, so whatever a Java worker stored
stays. A checkpoint does not bump
``leaseCounter``: only the supervisor's renewals do, so the shard's driver (in a pool process)
never races its own supervisor; fencing comes from the owner condition instead.

A lost race (ConditionalCheckFailed) is a ``None``/``False`` result (so is a write whose
returned row is no longer a lease: someone edited a value meanwhile), not an exception, and a
checkpoint not stored is an ``errors.CheckpointOutcome`` (the shard driver's processor gets
its Java name from ``multilang.wire``); every other failure is translated to
``errors.DependencyError``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from functools import partial
from typing import Any

from kcl_mp.aws.dynamodb import create_table, table_status
from kcl_mp.aws.errors import AWS_ERRORS, CONDITION_FAILED, call, is_conditional_failure, translate
from kcl_mp.errors import CheckpointOutcome, ThrottledError
from kcl_mp.leases.lease import (
    CHECKPOINT,
    CHECKPOINT_OWNER,
    CHECKPOINT_SUB,
    CHILD_SHARD_IDS,
    ENTITY_TYPE,
    LEASE_COUNTER,
    LEASE_ENTITY,
    LEASE_KEY,
    LEASE_OWNER,
    OWNER_SWITCHES,
    PENDING_CHECKPOINT,
    PENDING_CHECKPOINT_STATE,
    PENDING_CHECKPOINT_SUB,
    RELEASED_BY,
    RELEASED_UNTIL,
    Lease,
    not_a_lease,
)
from kcl_mp.leases.rows import OtherRow, TableScan, read_items
from kcl_mp.sequence import SHARD_END, ExtendedSequenceNumber

OWNER_INDEX = "LeaseOwnerToLeaseKeyIndex"
# This worker (:me) holds the lease: it owns it, or it is the old owner of a handoff.
_HOLDS = "((#o = :me AND attribute_not_exists(#co)) OR #co = :me)"
# The item is a lease, not a row KCL 3.5 keeps beside them (lease.not_a_lease's rule).
_IS_LEASE = "attribute_type(#lc, :n) AND (attribute_not_exists(#et) OR #et = :lease)"
_IS_LEASE_NAMES = {"#lc": LEASE_COUNTER, "#et": ENTITY_TYPE}
_IS_LEASE_VALUES = {":n": {"S": "N"}, ":lease": {"S": LEASE_ENTITY}}
# The lease's shard is not finished ("open"; ``#cp``: checkpoint, ``:end``: SHARD_END).
_OPEN = "(attribute_not_exists(#cp) OR #cp <> :end)"



class LeaseTable:
    """One application's lease table, reached through a boto3 DynamoDB client."""

    def __init__(self, client: Any, table_name: str, streams: Collection[str] = ()):
        """``streams``: a multi-stream application's stream names; its leases have Java's
        multi-stream keys, and a row of another stream or mode is not one (``lease.not_a_lease``)."""
        self.client = client
        self.name = table_name
        self.streams = frozenset(streams)
        self.others: tuple[OtherRow, ...] = ()

    # -- the table itself ------------------------------------------------------------

    def ensure_table(
        self, *, deletion_protection: bool = False, pitr: bool = False, wait_s: float = 120.0
    ) -> bool:
        """Create the table (on-demand, as the Java KCL 3.x does) unless it exists; wait for ACTIVE.

        Returns True when this call created it.
        """
        created = create_table(
            self.client, self.name, "lease table", wait_s,
            KeySchema=[{"AttributeName": LEASE_KEY, "KeyType": "HASH"}],
            AttributeDefinitions=[
                {"AttributeName": LEASE_KEY, "AttributeType": "S"},
                {"AttributeName": LEASE_OWNER, "AttributeType": "S"},
            ],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": OWNER_INDEX,
                    "KeySchema": [
                        {"AttributeName": LEASE_OWNER, "KeyType": "HASH"},
                        {"AttributeName": LEASE_KEY, "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                }
            ],
            BillingMode="PAY_PER_REQUEST",
            DeletionProtectionEnabled=deletion_protection,
        )
        if created and pitr:
            call(f"enabling PITR on {self.name}", partial(
                self.client.update_continuous_backups, TableName=self.name,
                PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}))
        return created

    def _status(self) -> str | None:
        return table_status(self.client, self.name, "lease table")

    # -- reads -----------------------------------------------------------------------

    def scan(self) -> TableScan:
        """Every row: the leases, and apart from them the rows that are not leases (the last
        scan's are kept in ``others``: the supervisor counts and reports them)."""
        found = read_items(self._items(), self.streams)
        self.others = found.others
        return found

    def list_leases(self) -> list[Lease]:
        return list(self.scan().leases)

    def _items(self) -> Iterator[dict[str, Any]]:
        kwargs: dict[str, Any] = {"TableName": self.name, "ConsistentRead": True}
        for _ in range(100_000):  # bounded: 100k pages of up to 1 MB
            page = call(f"scanning lease table {self.name}", partial(self.client.scan, **kwargs))
            yield from page.get("Items", ())
            if "LastEvaluatedKey" not in page:
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def get(self, key: str) -> Lease | None:
        item = call(f"reading lease {key}", partial(
            self.client.get_item, TableName=self.name, Key={LEASE_KEY: {"S": key}}, ConsistentRead=True)).get("Item")
        return None if item is None or not_a_lease(item, self.streams) else Lease.from_item(item)

    # -- ownership writes (the supervisor's) ------------------------------------------

    def create_if_absent(self, lease: Lease) -> bool:
        return call(f"creating lease {lease.key}", partial(
            self.client.put_item, TableName=self.name, Item=lease.new_item(),
            ConditionExpression="attribute_not_exists(#k)", ExpressionAttributeNames={"#k": LEASE_KEY},
        ), {CONDITION_FAILED: None}) is not None

    def take(self, lease: Lease, owner: str) -> Lease | None:
        """Take ``lease`` as last seen (unowned, expired, or stolen); None if it moved since."""
        update = "SET #o = :me, #c = :next REMOVE #co"
        values: dict[str, Any] = {
            ":me": {"S": owner},
            ":c": {"N": str(lease.counter)},
            ":next": {"N": str(lease.counter + 1)},
            ":end": {"S": SHARD_END},
        }
        names = {"#o": LEASE_OWNER, "#c": LEASE_COUNTER, "#co": CHECKPOINT_OWNER, "#cp": CHECKPOINT}
        if lease.owner is not None and lease.owner != owner:
            update += " ADD #sw :one"
            values[":one"] = {"N": "1"}
            names["#sw"] = OWNER_SWITCHES
        # open too: a checkpoint does not move the counter, so a shard end written since
        # ``lease`` was read passes the counter check alone
        return self._update(lease.key, update, f"#c = :c AND {_OPEN}", names, values, f"taking lease {lease.key}")

    def renew(self, lease: Lease, owner: str, extra: dict[str, Any] | None = None) -> Lease | None:
        """Bump the counter of a lease this worker holds; None if it was lost.

        ``extra`` attributes are SET with the counter: KCL 3.x's ``throughputKBps``
        (``throughput.renewal_attributes``).
        The result may name another ``leaseOwner`` with this worker as ``checkpointOwner``:
        a handoff was asked for; the caller stops the processor, then ``handoff_finish``.
        """
        extra = extra or {}
        names = {f"#x{i}": name for i, name in enumerate(extra)}
        values = {f":x{i}": value for i, value in enumerate(extra.values())}
        return self._update(
            lease.key,
            "SET #c = :next" + "".join(f", #x{i} = :x{i}" for i in range(len(extra))),
            f"#c = :c AND {_HOLDS}",
            {"#c": LEASE_COUNTER, "#o": LEASE_OWNER, "#co": CHECKPOINT_OWNER, **names},
            {":c": {"N": str(lease.counter)}, ":next": {"N": str(lease.counter + 1)}, ":me": {"S": owner}, **values},
            f"renewing lease {lease.key}",
        )

    def handoff_start(self, lease: Lease, new_owner: str) -> Lease | None:
        """Ask ``lease``'s owner to hand it over to ``new_owner`` after a last checkpoint."""
        if not lease.owner:
            raise ValueError(f"lease {lease.key} has no owner to hand it over")
        return self._update(
            lease.key,
            "SET #o = :me, #co = :old",
            f"#o = :old AND attribute_not_exists(#co) AND {_OPEN}",
            {"#o": LEASE_OWNER, "#co": CHECKPOINT_OWNER, "#cp": CHECKPOINT},
            {":me": {"S": new_owner}, ":old": {"S": lease.owner}, ":end": {"S": SHARD_END}},
            f"starting the handoff of lease {lease.key}",
        )

    def handoff_finish(self, key: str, old_owner: str) -> bool:
        """The old owner is done (final checkpoint written): the new owner may start."""
        return self._update(
            key,
            "REMOVE #co ADD #c :one",
            "#co = :me",
            {"#co": CHECKPOINT_OWNER, "#c": LEASE_COUNTER},
            {":me": {"S": old_owner}, ":one": {"N": "1"}},
            f"finishing the handoff of lease {key}",
        ) is not None

    def handoff_cancel(self, key: str, new_owner: str, old_owner: str) -> bool:
        """The new owner gives up before the handoff ends (it is stopping): the lease stays."""
        return self._update(
            key,
            "SET #o = :old REMOVE #co",
            "#o = :me AND #co = :old",
            {"#o": LEASE_OWNER, "#co": CHECKPOINT_OWNER},
            {":me": {"S": new_owner}, ":old": {"S": old_owner}},
            f"cancelling the handoff of lease {key}",
        ) is not None

    def release(self, key: str, owner: str) -> bool:
        """Give a held lease up so another worker can take it at once (no expiry wait)."""
        return (
            self._update(
                key,
                "REMOVE #o ADD #c :one",
                "#o = :me AND attribute_not_exists(#co)",
                {"#o": LEASE_OWNER, "#co": CHECKPOINT_OWNER, "#c": LEASE_COUNTER},
                {":me": {"S": owner}, ":one": {"N": "1"}},
                f"releasing lease {key}",
            )
            is not None
        )

    def give_up(self, key: str, owner: str, until_ms: int) -> bool:
        """Release a lease whose processor kept failing here, saying until when this worker
        should not get it back (``lease.released_by``)."""
        return (
            self._update(
                key,
                "REMOVE #o SET #rb = :me, #ru = :until ADD #c :one",
                "#o = :me AND attribute_not_exists(#co)",
                {"#o": LEASE_OWNER, "#co": CHECKPOINT_OWNER, "#c": LEASE_COUNTER, "#rb": RELEASED_BY,
                 "#ru": RELEASED_UNTIL},
                {":me": {"S": owner}, ":one": {"N": "1"}, ":until": {"N": str(until_ms)}},
                f"giving lease {key} up",
            )
            is not None
        )

    def delete(self, key: str) -> bool:
        """Delete a lease of a former stream, whoever holds it (``leases.stream_changes`` decides);
        False when it is gone already (or no longer a lease)."""
        return call(f"deleting lease {key}", partial(
            self.client.delete_item, TableName=self.name, Key={LEASE_KEY: {"S": key}},
            ConditionExpression=_IS_LEASE, ExpressionAttributeNames=dict(_IS_LEASE_NAMES),
            ExpressionAttributeValues=dict(_IS_LEASE_VALUES),
        ), {CONDITION_FAILED: None}) is not None

    def delete_finished(self, key: str) -> bool:
        """Delete a lease whose shard was processed to its end (shard_sync.plan_cleanup decides)."""
        return call(f"deleting lease {key}", partial(
            self.client.delete_item, TableName=self.name, Key={LEASE_KEY: {"S": key}},
            ConditionExpression=f"{_IS_LEASE} AND #cp = :end",
            ExpressionAttributeNames={"#cp": CHECKPOINT, **_IS_LEASE_NAMES},
            ExpressionAttributeValues={":end": {"S": SHARD_END}, **_IS_LEASE_VALUES},
        ), {CONDITION_FAILED: None}) is not None

    def add_child_shards(self, key: str, children: list[str]) -> bool:
        """Record a finished shard's children in its lease (``childShardIds``, as Java writes it)."""
        return self._update(
            key, "ADD #ch :children", "attribute_exists(#k)", {"#ch": CHILD_SHARD_IDS},
            {":children": {"SS": sorted(children)}}, f"recording the children of lease {key}",
        ) is not None

    # -- the checkpoint write (the shard driver's) ------------------------------------

    def checkpoint(self, key: str, owner: str, position: ExtendedSequenceNumber) -> CheckpointOutcome | None:
        """Store a checkpoint if ``owner`` still holds the lease; None when stored, else why not."""
        try:
            self.client.update_item(
                TableName=self.name,
                Key={LEASE_KEY: {"S": key}},
                UpdateExpression="SET #cp = :seq, #cs = :sub, #sw = :zero REMOVE #p, #ps, #pst",
                ConditionExpression=f"{_IS_LEASE} AND {_HOLDS} AND {_OPEN}",
                ExpressionAttributeNames={
                    "#cp": CHECKPOINT,
                    "#cs": CHECKPOINT_SUB,
                    "#sw": OWNER_SWITCHES,
                    "#p": PENDING_CHECKPOINT,
                    "#ps": PENDING_CHECKPOINT_SUB,
                    "#pst": PENDING_CHECKPOINT_STATE,
                    "#o": LEASE_OWNER,
                    "#co": CHECKPOINT_OWNER,
                    **_IS_LEASE_NAMES,
                },
                ExpressionAttributeValues={
                    **_IS_LEASE_VALUES,
                    ":seq": {"S": position.sequence_number},
                    ":sub": {"N": str(position.sub_sequence_number)},
                    ":zero": {"N": "0"},
                    ":me": {"S": owner},
                    ":end": {"S": SHARD_END},
                },
            )
            return None
        except AWS_ERRORS as exc:
            if is_conditional_failure(exc):
                current = self.get(key)
                if current is None or current.holder != owner:
                    return CheckpointOutcome.LEASE_MOVED
                return CheckpointOutcome.INVALID_STATE  # the lease is already at SHARD_END
            error = translate(exc, f"checkpointing lease {key}")
            if error.code == "ResourceNotFoundException":
                return CheckpointOutcome.INVALID_STATE
            return CheckpointOutcome.THROTTLED if isinstance(error, ThrottledError) else CheckpointOutcome.FAILED

    def _update(
        self, key: str, update: str, condition: str, names: dict[str, str], values: dict[str, Any], what: str
    ) -> Lease | None:
        response = call(what, partial(
            self.client.update_item, TableName=self.name, Key={LEASE_KEY: {"S": key}}, UpdateExpression=update,
            ConditionExpression=f"attribute_exists(#k) AND {_IS_LEASE} AND ({condition})",
            ExpressionAttributeNames={"#k": LEASE_KEY, **_IS_LEASE_NAMES, **names},
            ExpressionAttributeValues={**_IS_LEASE_VALUES, **values}, ReturnValues="ALL_NEW",
        ), {CONDITION_FAILED: None})
        if response is None:
            return None
        # Written, but the row now holds a value no lease may (someone edited it meanwhile): it is
        # no lease of ours any more, as the next scan will show it apart.
        item = response["Attributes"]
        return None if not_a_lease(item, self.streams) else Lease.from_item(item)
