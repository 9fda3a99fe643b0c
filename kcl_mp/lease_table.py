"""The DynamoDB lease table: every read and conditional write kcl-mp makes.

Conditions sent (``:me`` is this worker's id, ``:c`` the counter last seen):

    create      PutItem     attribute_not_exists(leaseKey)
    take        UpdateItem  leaseCounter = :c
                            SET leaseOwner = :me, leaseCounter = :c + 1
                            [ADD ownerSwitchesSinceCheckpoint 1 when the owner changes]
                            REMOVE checkpointOwner
    renew       UpdateItem  leaseCounter = :c AND leaseOwner = :me
                            SET leaseCounter = :c + 1
    release     UpdateItem  leaseOwner = :me
                            REMOVE leaseOwner, checkpointOwner  ADD leaseCounter 1
    checkpoint  UpdateItem  leaseOwner = :me AND (attribute_not_exists(checkpoint)
                            OR checkpoint <> SHARD_END)
                            SET checkpoint, checkpointSubSequenceNumber,
                            ownerSwitchesSinceCheckpoint = 0
                            REMOVE pendingCheckpoint, pendingCheckpointSubSequenceNumber,
                            pendingCheckpointState
    delete      DeleteItem  leaseOwner = :me OR attribute_not_exists(leaseOwner)

These are the Java KCL's writes (DynamoDBLeaseRefresher / DynamoDBLeaseSerializer), so
Java workers and kcl-mp workers can share one table. UpdateItem never touches attributes
it does not name, so whatever a Java worker stored stays. A checkpoint does not bump
``leaseCounter``: only the supervisor's renewals do, so the shard worker (another process)
never races its own supervisor; fencing comes from the owner condition instead.

A lost race (ConditionalCheckFailed) is a ``None``/``False`` result, not an exception;
every other failure is translated to ``errors.DependencyError``.
"""

from __future__ import annotations

import time
from typing import Any, Iterator

from .aws import AWS_ERRORS, error_code, is_conditional_failure, translate
from .errors import DependencyError, ThrottledError
from .lease import (
    CHECKPOINT,
    CHECKPOINT_OWNER,
    CHECKPOINT_SUB,
    LEASE_COUNTER,
    LEASE_KEY,
    LEASE_OWNER,
    OWNER_SWITCHES,
    PENDING_CHECKPOINT,
    PENDING_CHECKPOINT_STATE,
    PENDING_CHECKPOINT_SUB,
    SHARD_END,
    ExtendedSequenceNumber,
    Lease,
)

OWNER_INDEX = "LeaseOwnerToLeaseKeyIndex"

# What a checkpoint write reports to the processor (PROTOCOL.md section 5.3).
CHECKPOINT_LEASE_LOST = "ShutdownException"
CHECKPOINT_THROTTLED = "ThrottlingException"
CHECKPOINT_DEPENDENCY = "KinesisClientLibDependencyException"
CHECKPOINT_INVALID_STATE = "InvalidStateException"


class LeaseTable:
    """One application's lease table, reached through a boto3 DynamoDB client."""

    def __init__(self, client: Any, table_name: str):
        self.client = client
        self.name = table_name

    # -- the table itself ------------------------------------------------------------

    def ensure_table(
        self, *, deletion_protection: bool = False, pitr: bool = False, wait_s: float = 120.0
    ) -> bool:
        """Create the table (on-demand, as the Java KCL 3.x does) unless it exists; wait for ACTIVE.

        Returns True when this call created it.
        """
        created = False
        if self._status() is None:
            try:
                self.client.create_table(
                    TableName=self.name,
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
                created = True
            except AWS_ERRORS as exc:
                if error_code(exc) != "ResourceInUseException":  # another worker won the race
                    raise translate(exc, f"creating lease table {self.name}") from exc
        deadline = time.monotonic() + wait_s
        delay = 0.1
        while (status := self._status()) != "ACTIVE":
            if time.monotonic() > deadline:
                raise DependencyError(
                    f"lease table {self.name} is {status or 'missing'} after {wait_s:.0f} s; expected ACTIVE",
                    retriable=False,
                )
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
        if created and pitr:
            try:
                self.client.update_continuous_backups(
                    TableName=self.name,
                    PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True},
                )
            except AWS_ERRORS as exc:
                raise translate(exc, f"enabling PITR on {self.name}") from exc
        return created

    def _status(self) -> str | None:
        try:
            return self.client.describe_table(TableName=self.name)["Table"]["TableStatus"]
        except AWS_ERRORS as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return None
            raise translate(exc, f"describing lease table {self.name}") from exc

    # -- reads -----------------------------------------------------------------------

    def list_leases(self) -> list[Lease]:
        return list(self._scan())

    def _scan(self) -> Iterator[Lease]:
        kwargs: dict[str, Any] = {"TableName": self.name, "ConsistentRead": True}
        for _ in range(100_000):  # bounded: 100k pages of up to 1 MB
            try:
                page = self.client.scan(**kwargs)
            except AWS_ERRORS as exc:
                raise translate(exc, f"scanning lease table {self.name}") from exc
            for item in page.get("Items", ()):
                yield Lease.from_item(item)
            if "LastEvaluatedKey" not in page:
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def get(self, key: str) -> Lease | None:
        try:
            item = self.client.get_item(
                TableName=self.name, Key={LEASE_KEY: {"S": key}}, ConsistentRead=True
            ).get("Item")
        except AWS_ERRORS as exc:
            raise translate(exc, f"reading lease {key}") from exc
        return None if item is None else Lease.from_item(item)

    # -- ownership writes (the supervisor's) ------------------------------------------

    def create_if_absent(self, lease: Lease) -> bool:
        try:
            self.client.put_item(
                TableName=self.name,
                Item=lease.to_item(),
                ConditionExpression="attribute_not_exists(#k)",
                ExpressionAttributeNames={"#k": LEASE_KEY},
            )
            return True
        except AWS_ERRORS as exc:
            if is_conditional_failure(exc):
                return False
            raise translate(exc, f"creating lease {lease.key}") from exc

    def take(self, lease: Lease, owner: str) -> Lease | None:
        """Take ``lease`` as last seen (unowned, expired, or stolen); None if it moved since."""
        update = "SET #o = :me, #c = :next REMOVE #co"
        values: dict[str, Any] = {
            ":me": {"S": owner},
            ":c": {"N": str(lease.counter)},
            ":next": {"N": str(lease.counter + 1)},
        }
        names = {"#o": LEASE_OWNER, "#c": LEASE_COUNTER, "#co": CHECKPOINT_OWNER}
        if lease.owner is not None and lease.owner != owner:
            update += " ADD #sw :one"
            values[":one"] = {"N": "1"}
            names["#sw"] = OWNER_SWITCHES
        return self._update(lease.key, update, "#c = :c", names, values, f"taking lease {lease.key}")

    def renew(self, lease: Lease, owner: str) -> Lease | None:
        """Bump the counter of a lease this worker holds; None if it was lost."""
        return self._update(
            lease.key,
            "SET #c = :next",
            "#c = :c AND #o = :me",
            {"#c": LEASE_COUNTER, "#o": LEASE_OWNER},
            {":c": {"N": str(lease.counter)}, ":next": {"N": str(lease.counter + 1)}, ":me": {"S": owner}},
            f"renewing lease {lease.key}",
        )

    def release(self, key: str, owner: str) -> bool:
        """Give a held lease up so another worker can take it at once (no expiry wait)."""
        return (
            self._update(
                key,
                "REMOVE #o, #co ADD #c :one",
                "#o = :me",
                {"#o": LEASE_OWNER, "#co": CHECKPOINT_OWNER, "#c": LEASE_COUNTER},
                {":me": {"S": owner}, ":one": {"N": "1"}},
                f"releasing lease {key}",
            )
            is not None
        )

    def delete(self, key: str, owner: str) -> bool:
        try:
            self.client.delete_item(
                TableName=self.name,
                Key={LEASE_KEY: {"S": key}},
                ConditionExpression="#o = :me OR attribute_not_exists(#o)",
                ExpressionAttributeNames={"#o": LEASE_OWNER},
                ExpressionAttributeValues={":me": {"S": owner}},
            )
            return True
        except AWS_ERRORS as exc:
            if is_conditional_failure(exc):
                return False
            raise translate(exc, f"deleting lease {key}") from exc

    # -- the checkpoint write (the shard worker's) ------------------------------------

    def checkpoint(self, key: str, owner: str, position: ExtendedSequenceNumber) -> str | None:
        """Store a checkpoint if ``owner`` still holds the lease; None or the error name for the child."""
        try:
            self.client.update_item(
                TableName=self.name,
                Key={LEASE_KEY: {"S": key}},
                UpdateExpression="SET #cp = :seq, #cs = :sub, #sw = :zero REMOVE #p, #ps, #pst",
                ConditionExpression="#o = :me AND (attribute_not_exists(#cp) OR #cp <> :end)",
                ExpressionAttributeNames={
                    "#cp": CHECKPOINT,
                    "#cs": CHECKPOINT_SUB,
                    "#sw": OWNER_SWITCHES,
                    "#p": PENDING_CHECKPOINT,
                    "#ps": PENDING_CHECKPOINT_SUB,
                    "#pst": PENDING_CHECKPOINT_STATE,
                    "#o": LEASE_OWNER,
                },
                ExpressionAttributeValues={
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
                if current is None or current.owner != owner:
                    return CHECKPOINT_LEASE_LOST
                return CHECKPOINT_INVALID_STATE  # the lease is already at SHARD_END
            error = translate(exc, f"checkpointing lease {key}")
            if error.code == "ResourceNotFoundException":
                return CHECKPOINT_INVALID_STATE
            return CHECKPOINT_THROTTLED if isinstance(error, ThrottledError) else CHECKPOINT_DEPENDENCY

    def _update(
        self, key: str, update: str, condition: str, names: dict[str, str], values: dict[str, Any], what: str
    ) -> Lease | None:
        try:
            response = self.client.update_item(
                TableName=self.name,
                Key={LEASE_KEY: {"S": key}},
                UpdateExpression=update,
                ConditionExpression=f"attribute_exists(#k) AND ({condition})",
                ExpressionAttributeNames={"#k": LEASE_KEY, **names},
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
            )
        except AWS_ERRORS as exc:
            if is_conditional_failure(exc):
                return None
            raise translate(exc, what) from exc
        return Lease.from_item(response["Attributes"])
