"""The lease table's lease-owner index: a 3.x follower's way to its assigned leases.

Java (DynamoDBLeaseRefresher, 3.1.3 and 3.5) names it ``LeaseOwnerToLeaseKeyIndex``:
hash key ``leaseOwner`` S, range key ``leaseKey`` S, projection KEYS_ONLY. A 3.x worker
creates it at start when the table lacks it (createLeaseOwnerToLeaseKeyIndexIfNotExists:
UpdateTable with the two attribute definitions and the GSI, on demand when the table is,
else with the table's own read and write capacity) and, starting in 3.x, waits for it to be
ACTIVE (polls every 10 s, 600 s at most). A follower lists its leases with

    Query  IndexName LeaseOwnerToLeaseKeyIndex  KeyConditionExpression leaseOwner = :leaseOwner

(every page), then reads each lease by its key. kcl-mp's own table has the index from its
creation (``table.OWNER_INDEX``); this module adds it to a table made without it. Rows that
are not leases (the 3.5 lock, state and worker-metrics rows) have no ``leaseOwner`` and
never appear in the index.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from kcl_mp.aws.errors import AWS_ERRORS, IN_USE, NOT_FOUND, call, error_code, translate
from kcl_mp.errors import DependencyError
from kcl_mp.leases.lease import LEASE_KEY, LEASE_OWNER
from kcl_mp.leases.table import OWNER_INDEX


def index_status(client: Any, table: str) -> str | None:
    """The index's status (CREATING, ACTIVE...), or None when the table has no such index."""
    return _status(_describe(client, table))


def ensure_owner_index(client: Any, table: str) -> str:
    """Create the index unless the table has it; its status (CREATING when just asked for)."""
    description = _describe(client, table)
    if (status := _status(description)) is not None:
        return status
    create: dict[str, Any] = {
        "IndexName": OWNER_INDEX,
        "KeySchema": [{"AttributeName": LEASE_OWNER, "KeyType": "HASH"},
                      {"AttributeName": LEASE_KEY, "KeyType": "RANGE"}],
        "Projection": {"ProjectionType": "KEYS_ONLY"},
    }
    if description.get("BillingModeSummary", {}).get("BillingMode") != "PAY_PER_REQUEST":
        capacity = description["ProvisionedThroughput"]
        create["ProvisionedThroughput"] = {"ReadCapacityUnits": capacity["ReadCapacityUnits"],
                                           "WriteCapacityUnits": capacity["WriteCapacityUnits"]}
    try:
        response = client.update_table(
            TableName=table,
            AttributeDefinitions=[{"AttributeName": LEASE_OWNER, "AttributeType": "S"},
                                  {"AttributeName": LEASE_KEY, "AttributeType": "S"}],
            GlobalSecondaryIndexUpdates=[{"Create": create}])
    except AWS_ERRORS as exc:  # the raw error: refused because another worker asked first, or not
        if error_code(exc) in ("ValidationException", IN_USE):
            if (status := index_status(client, table)) is not None:
                return status
        raise translate(exc, f"creating {OWNER_INDEX} on lease table {table}") from exc
    return _status(response["TableDescription"]) or "CREATING"


def _describe(client: Any, table: str) -> dict[str, Any]:
    return call(f"describing lease table {table}", partial(client.describe_table, TableName=table))["Table"]


def _status(description: dict[str, Any]) -> str | None:
    return next((index.get("IndexStatus", "ACTIVE") for index in description.get("GlobalSecondaryIndexes", ())
                 if index["IndexName"] == OWNER_INDEX), None)


def wait_for_owner_index(client: Any, table: str, *, poll_s: float = 10.0, timeout_s: float = 600.0) -> bool:
    """Whether the index became ACTIVE within ``timeout_s`` (Java's 10 s polls, 600 s)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if index_status(client, table) == "ACTIVE":
            return True
        if time.monotonic() + poll_s > deadline:
            return False
        time.sleep(poll_s)


def lease_keys_for_worker(client: Any, table: str, worker_id: str) -> list[str]:
    """The keys of the leases ``worker_id`` owns, by the index (listLeaseKeysForWorker)."""
    kwargs: dict[str, Any] = {
        "TableName": table, "IndexName": OWNER_INDEX,
        "KeyConditionExpression": f"{LEASE_OWNER} = :{LEASE_OWNER}",
        "ExpressionAttributeValues": {f":{LEASE_OWNER}": {"S": worker_id}},
    }
    keys: list[str] = []
    for _ in range(100_000):  # bounded: 100k pages
        page = call(f"listing the leases of {worker_id} in {table}", partial(client.query, **kwargs),
                    {NOT_FOUND: NOT_FOUND, "ValidationException": "ValidationException"})
        if isinstance(page, str):
            raise DependencyError(f"{OWNER_INDEX} does not exist on lease table {table}", retriable=False, code=page)
        keys.extend(item[LEASE_KEY]["S"] for item in page.get("Items", ()))
        if not page.get("LastEvaluatedKey"):
            return keys
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    raise DependencyError(f"listing the leases of {worker_id} in {table}: more than 100000 pages")
