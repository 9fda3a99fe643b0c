"""DynamoDB requests that several tables' code makes alike."""

from __future__ import annotations

import time
from typing import Any

from kcl_mp.aws.errors import IN_USE, NOT_FOUND, call
from kcl_mp.errors import DependencyError


def _described(client: Any, name: str, label: str) -> dict[str, Any] | None:
    """DescribeTable's ``Table``, None when the table does not exist."""
    described = call(f"describing {label} {name}", lambda: client.describe_table(TableName=name), {NOT_FOUND: None})
    return None if described is None else dict(described["Table"])


def table_status(client: Any, name: str, label: str = "table") -> str | None:
    """The table's TableStatus (ACTIVE, CREATING, ...), None when it does not exist."""
    described = _described(client, name, label)
    return None if described is None else str(described["TableStatus"])


def create_table(client: Any, name: str, label: str, wait_s: float, **request: Any) -> bool:
    """Create the table unless it exists (another worker winning the race is fine) and wait up
    to ``wait_s`` for it to be ACTIVE; whether this call created it. A table of that name with
    another key (a data table named as the application) is an error naming both keys: every
    read and write would fail on it."""
    created = False
    if table_status(client, name, label) is None:
        created = call(f"creating {label} {name}", lambda: client.create_table(TableName=name, **request),
                       {IN_USE: None}) is not None
    deadline = time.monotonic() + wait_s
    delay = 0.1
    while (described := _described(client, name, label)) is None or described["TableStatus"] != "ACTIVE":
        if time.monotonic() > deadline:
            status = described["TableStatus"] if described else "missing"
            raise DependencyError(f"{label} {name} is {status} after {wait_s:.0f} s; expected ACTIVE", retriable=False)
        time.sleep(delay)
        delay = min(delay * 2, 2.0)
    wanted, found = _key(request.get("KeySchema", [])), _key(described.get("KeySchema", []))
    if wanted and found != wanted:
        raise DependencyError(f"table {name} exists with the key {found}, not a {label}'s ({wanted}): another "
                              "table has that name (kcl-mp names its tables after applicationName, unless a key of "
                              "their own names them)", retriable=False)
    return created


def _key(schema: list[dict[str, str]]) -> str:
    return ", ".join(f"{part['AttributeName']} {part['KeyType']}" for part in schema)


def scan_all(client: Any, what: str, *, missing_is_empty: bool = False, **request: Any) -> list[dict[str, Any]]:
    """Every item of a paginated Scan; ``missing_is_empty``: a table that does not exist holds
    nothing (a KCL 3.x own table not made yet: Java's disabled delegate), else it is an error."""
    outcomes: dict[str, list[dict[str, Any]]] = {NOT_FOUND: []} if missing_is_empty else {}
    return call(what, lambda: [item for page in client.get_paginator("scan").paginate(**request)
                               for item in page.get("Items", [])], outcomes)
