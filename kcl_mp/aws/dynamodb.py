"""DynamoDB requests that several tables' code makes alike."""

from __future__ import annotations

from typing import Any

from kcl_mp.aws.errors import NOT_FOUND, call


def table_status(client: Any, name: str) -> str | None:
    """The table's TableStatus (ACTIVE, CREATING, ...), None when it does not exist."""
    described = call(f"describing table {name}", lambda: client.describe_table(TableName=name), {NOT_FOUND: None})
    return None if described is None else str(described["Table"]["TableStatus"])


def scan_all(client: Any, what: str, *, missing_is_empty: bool = False, **request: Any) -> list[dict[str, Any]]:
    """Every item of a paginated Scan; ``missing_is_empty``: a table that does not exist holds
    nothing (a KCL 3.x own table not made yet: Java's disabled delegate), else it is an error."""
    outcomes: dict[str, list[dict[str, Any]]] = {NOT_FOUND: []} if missing_is_empty else {}
    return call(what, lambda: [item for page in client.get_paginator("scan").paginate(**request)
                               for item in page.get("Items", [])], outcomes)
