"""The lease table's rows that are not leases, and one scan split into leases and the rest.

Pure data, no I/O. The Java KCL 3.5 keeps its coordinator state and worker metrics in the
lease table itself, each row keyed by ``leaseKey`` and marked by ``entityType``
(tests/fixtures/java_kcl_3.5_rows.json has them as Java writes them)::

    leaseKey             entityType                kept by Java's
    Leader               LEADER                    DynamoDB lock client (leader election)
    Migration3.0         CLIENT_VERSION_MIGRATION  MigrationState (the fleet's client version)
    TableMigration3.5    TABLE_MIGRATION           TableMigrationState
    <worker id>          WORKER_METRIC_STATS       WorkerMetricStats

kcl-mp leaves every such row alone (``lease.not_a_lease`` decides; the lease table's
writes are conditioned on it too): an ``OtherRow`` keeps the item exactly as scanned, with
a small typed view of what Java stored in it, for the report and for whatever later reads
these rows as Java does. A row of an unknown kind, or a lease-like row kcl-mp cannot read
exactly, has no view; its ``why`` says what it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from kcl_mp.leases.lease import ENTITY_TYPE, LEASE_KEY, Lease, not_a_lease

Item = Mapping[str, Mapping[str, Any]]

# Java's EntityType values (the entityType attribute) and well-known keys.
LEADER = "LEADER"
CLIENT_VERSION_MIGRATION = "CLIENT_VERSION_MIGRATION"
TABLE_MIGRATION = "TABLE_MIGRATION"
WORKER_METRIC_STATS = "WORKER_METRIC_STATS"
LEADER_KEY = "Leader"
MIGRATION_KEY = "Migration3.0"
TABLE_MIGRATION_KEY = "TableMigration3.5"


@dataclass(frozen=True)
class LeaderLock:
    """The leader's lock (the DynamoDB lock client's item)."""

    owner: str
    lease_duration_ms: int
    record_version: str
    released: bool  # isReleased "1": given up without deleting the item


@dataclass(frozen=True)
class StateChange:
    """One entry of a state's history: what it was, set by whom, when (epoch ms)."""

    value: str
    modified_by: str
    modified_at_ms: int


@dataclass(frozen=True)
class CoordinatorState:
    """Migration3.0's client version (cv) or TableMigration3.5's status (tm), with history."""

    value: str
    modified_by: str
    modified_at_ms: int
    history: tuple[StateChange, ...]  # newest first

    def attributes(self, name: str) -> dict[str, dict[str, Any]]:
        """The item's state attributes as Java writes them (``name``: cv or tm; no key,
        no entityType; ``h`` absent when the history is empty).

        >>> CoordinatorState("CLIENT_VERSION_3X", "w1", 2, (StateChange("CLIENT_VERSION_INIT", "w1", 1),)
        ...                  ).attributes("cv")["h"]
        {'L': [{'M': {'cv': {'S': 'CLIENT_VERSION_INIT'}, 'mb': {'S': 'w1'}, 'mts': {'N': '1'}}}]}
        """
        out: dict[str, dict[str, Any]] = {name: {"S": self.value}, "mb": {"S": self.modified_by},
                                          "mts": {"N": str(self.modified_at_ms)}}
        if self.history:
            out["h"] = {"L": [{"M": {name: {"S": c.value}, "mb": {"S": c.modified_by},
                                     "mts": {"N": str(c.modified_at_ms)}}} for c in self.history]}
        return out


@dataclass(frozen=True)
class WorkerMetrics:
    """A worker's reported utilization: per metric (C, M, NI, NO, T) its recent values."""

    worker_id: str
    updated_at_s: int
    stats: Mapping[str, tuple[float, ...]]
    operating_range: Mapping[str, tuple[int, ...]]
    support_code: int | None
    support_updated_s: int | None = None  # slu: when the support code was last reported (3.5)


View = LeaderLock | CoordinatorState | WorkerMetrics


@dataclass(frozen=True)
class OtherRow:
    key: str
    entity_type: str | None  # as stored (None: absent or not a string)
    why: str  # why it is not a lease, from lease.not_a_lease
    item: Item = field(compare=False)  # exactly as scanned
    view: View | None = None  # what Java stored, when the row has the shape Java writes

    @classmethod
    def from_item(cls, item: Item, why: str) -> OtherRow:
        key = _s(item, LEASE_KEY) or ""
        entity_type = _s(item, ENTITY_TYPE)
        try:
            view = _view(key, entity_type, item)
        except (KeyError, TypeError, ValueError, AttributeError):
            view = None  # not the shape Java writes: shown by its key and entityType only
        return cls(key, entity_type, why, item, view)

    def summary(self) -> str:
        """One line for an operator.

        >>> OtherRow.from_item({"leaseKey": {"S": "Leader"}, "entityType": {"S": "LEADER"},
        ...     "ownerName": {"S": "w1"}, "leaseDuration": {"S": "120000"},
        ...     "recordVersionNumber": {"S": "r1"}}, "entityType LEADER").summary()
        'leader lock held by w1 (leaseDuration 120000 ms)'
        """
        view = self.view
        if isinstance(view, LeaderLock):
            if view.released:
                return f"leader lock released by {view.owner}"
            return f"leader lock held by {view.owner} (leaseDuration {view.lease_duration_ms} ms)"
        if isinstance(view, CoordinatorState):
            what = "client version" if self.entity_type == CLIENT_VERSION_MIGRATION else "table migration"
            return f"{what} {view.value}, set by {view.modified_by} at {_utc(view.modified_at_ms / 1000)}"
        if isinstance(view, WorkerMetrics):
            latest = ", ".join(f"{name} {values[-1]:g}" for name, values in sorted(view.stats.items()) if values)
            return f"worker metrics of {view.worker_id}, updated {_utc(view.updated_at_s)}" + (
                f" ({latest})" if latest else "")
        return f"not a lease: {self.why}"


@dataclass(frozen=True)
class TableScan:
    """One scan of the lease table: the leases, and apart from them every other row."""

    leases: tuple[Lease, ...]
    others: tuple[OtherRow, ...]


def read_items(items: Iterable[Item]) -> TableScan:
    """Split scanned items into leases and other rows, in the order scanned."""
    leases: list[Lease] = []
    others: list[OtherRow] = []
    for item in items:
        why = not_a_lease(item)
        if why is None:
            leases.append(Lease.from_item(item))
        else:
            others.append(OtherRow.from_item(item, why))
    return TableScan(tuple(leases), tuple(others))


def _view(key: str, entity_type: str | None, item: Item) -> View | None:
    """Java's reading of the row (CoordinatorStateDAODelegate falls back on the
    well-known keys for a state row without entityType)."""
    if entity_type == LEADER or (entity_type is None and key == LEADER_KEY and "ownerName" in item):
        return LeaderLock(item["ownerName"]["S"], int(item["leaseDuration"]["S"]),
                          item["recordVersionNumber"]["S"], _s(item, "isReleased") == "1")
    if entity_type == CLIENT_VERSION_MIGRATION or (entity_type is None and key == MIGRATION_KEY):
        return state_view(item, "cv")
    if entity_type == TABLE_MIGRATION or (entity_type is None and key == TABLE_MIGRATION_KEY):
        return state_view(item, "tm")
    if entity_type == WORKER_METRIC_STATS:
        return WorkerMetrics(
            worker_id=key,
            updated_at_s=int(item["lut"]["N"]),
            stats={name: tuple(float(v["N"]) for v in values["L"]) for name, values in _m(item, "sts").items()},
            operating_range={name: tuple(int(v["N"]) for v in values["L"])
                             for name, values in _m(item, "opr").items()},
            support_code=int(item["sup"]["N"]) if "sup" in item else None,
            support_updated_s=int(item["slu"]["N"]) if "slu" in item else None,
        )
    return None


def state_view(item: Item, name: str) -> CoordinatorState:
    """A state row (Migration3.0: ``cv``, TableMigration3.5: ``tm``) as Java's MigrationState reads it."""
    history = tuple(StateChange(entry["M"][name]["S"], entry["M"]["mb"]["S"], int(entry["M"]["mts"]["N"]))
                    for entry in item.get("h", {}).get("L", ()))
    return CoordinatorState(item[name]["S"], item["mb"]["S"], int(item["mts"]["N"]), history)


def _s(item: Item, name: str) -> str | None:
    value = item.get(name)
    return value.get("S") if isinstance(value, Mapping) else None


def _m(item: Item, name: str) -> Mapping[str, Any]:
    return item[name]["M"] if name in item else {}


def _utc(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def java_double(value: float) -> str:
    """A number as Java's Double.toString writes it (the KCL stores doubles so: DynamoUtils,
    the enhanced client): plain with at least one decimal from 1e-3 to 1e7, else d.dddE±n.

    >>> [java_double(v) for v in (12.5, 100.0, -1.0, 0.0, 0.0001, 12345678.9)]
    ['12.5', '100.0', '-1.0', '0.0', '1.0E-4', '1.23456789E7']
    """
    magnitude = abs(value)
    if magnitude == 0 or 1e-3 <= magnitude < 1e7:
        text = repr(float(value))
        return text if "." in text or "e" in text else text + ".0"
    sign, digits, exponent = Decimal(repr(float(value))).normalize().as_tuple()
    assert isinstance(exponent, int)  # finite: NaN and infinity are not DynamoDB numbers
    fraction = "".join(map(str, digits[1:])) or "0"
    return f"{'-' if sign else ''}{digits[0]}.{fraction}E{len(digits) - 1 + exponent}"
