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
exactly, has no view; its ``why`` says what it is. A row of a known kind whose values are not
what Java writes (a ``leaseDuration`` of "120000ms", an ``mts`` of "1.5") has no view either,
and its ``problem`` says which value is wrong: every reader here checks each value it takes
and raises ``RowError`` (a ValueError) naming the attribute, never KeyError or TypeError.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from kcl_mp.leases.lease import ENTITY_TYPE, KEY_SHOWN, LEASE_KEY, Lease, not_a_lease, quoted

Item = Mapping[str, Mapping[str, Any]]

# Java's EntityType values (the entityType attribute) and well-known keys.
LEADER = "LEADER"
CLIENT_VERSION_MIGRATION = "CLIENT_VERSION_MIGRATION"
TABLE_MIGRATION = "TABLE_MIGRATION"
WORKER_METRIC_STATS = "WORKER_METRIC_STATS"
CORES = "kclmpCores"  # kcl-mp's own, in a kcl-mp host's worker-metrics item: its capacity; Java's reader ignores it
LEADER_KEY = "Leader"
MIGRATION_KEY = "Migration3.0"
TABLE_MIGRATION_KEY = "TableMigration3.5"


class RowError(ValueError):
    """A row of a known kind holds a value Java would not write; the message names the attribute."""


@dataclass(frozen=True)
class LockView:
    """The leader's lock row as stored (the DynamoDB lock client's item), for reports; the
    election reads it as ``fleet.leader.Lock``."""

    owner: str
    lease_duration_ms: int
    record_version: str
    released: bool  # isReleased "1": given up without deleting the item


MAX_HISTORY = 10  # a coordinator state's history entries (Java's MAX_HISTORY_ENTRIES)


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

    def moved_to(self, value: str, by: str, now_ms: int) -> CoordinatorState:
        """The state after ``by`` sets ``value`` at ``now_ms``: the old value goes to the front of
        the history, which keeps MAX_HISTORY entries (Java's MigrationState and
        TableMigrationState both keep MAX_HISTORY_ENTRIES).

        >>> CoordinatorState("A", "w1", 1, ()).moved_to("B", "w2", 2).history
        (StateChange(value='A', modified_by='w1', modified_at_ms=1),)
        """
        before = StateChange(self.value, self.modified_by, self.modified_at_ms)
        return CoordinatorState(value, by, now_ms, ((before,) + self.history)[:MAX_HISTORY])

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
    cores: float | None = None  # kclmpCores: a kcl-mp host's capacity (None: a Java worker)


View = LockView | CoordinatorState | WorkerMetrics


@dataclass(frozen=True)
class OtherRow:
    key: str
    entity_type: str | None  # as stored (None: absent or not a string)
    why: str  # why it is not a lease, from lease.not_a_lease
    item: Item = field(compare=False)  # exactly as scanned
    view: View | None = None  # what Java stored, when the row has the shape Java writes
    problem: str | None = None  # why a row of a known kind has no view (RowError's message)

    @classmethod
    def from_item(cls, item: Item, why: str) -> OtherRow:
        key = _s(item, LEASE_KEY) or ""
        entity_type = _s(item, ENTITY_TYPE)
        try:
            return cls(key, entity_type, why, item, _view(key, entity_type, item))
        except RowError as exc:  # not the shape Java writes: shown by its key, kind and fault
            return cls(key, entity_type, why, item, None, str(exc))

    def summary(self) -> str:
        """One line for an operator.

        >>> OtherRow.from_item({"leaseKey": {"S": "Leader"}, "entityType": {"S": "LEADER"},
        ...     "ownerName": {"S": "w1"}, "leaseDuration": {"S": "120000"},
        ...     "recordVersionNumber": {"S": "r1"}}, "entityType LEADER").summary()
        'leader lock held by w1 (leaseDuration 120000 ms)'
        """
        view = self.view
        if isinstance(view, LockView):
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
        if self.problem is not None:
            return f"{self.entity_type or self.key} row kcl-mp cannot read: {self.problem}"
        return f"not a lease: {self.why}"


@dataclass(frozen=True)
class TableScan:
    """One scan of the lease table: the leases, and apart from them every other row."""

    leases: tuple[Lease, ...]
    others: tuple[OtherRow, ...]


def other_rows_line(others: Sequence[OtherRow], shown: int = 5) -> str:
    """The rows that are not leases, for one log line: their count and the first few, bounded
    whatever the table holds (keys escaped and cut, as in every message about a row).

    >>> other_rows_line([OtherRow.from_item({"leaseKey": {"S": f"bogus-{i}"}, "leaseCounter": {"N": "1"}},
    ...                                     f"leaseKey 'bogus-{i}' is not a shard id") for i in range(7)], 2)
    "7 rows that are not leases: 'bogus-0' (leaseKey 'bogus-0' is not a shard id), 'bogus-1' (leaseKey 'bogus-1' \
is not a shard id) and 5 more"
    """
    first = ", ".join(
        f"{quoted(row.key, KEY_SHOWN)} ({row.entity_type if row.view is not None else row.problem or row.why})"
        for row in others[:shown])
    more = f" and {len(others) - shown} more" if len(others) > shown else ""
    return f"{len(others)} row{'s' if len(others) != 1 else ''} that {'are' if len(others) != 1 else 'is'} " \
           f"not {'leases' if len(others) != 1 else 'a lease'}: {first}{more}"


def read_items(items: Iterable[Item], streams: Collection[str] = ()) -> TableScan:
    """Split scanned items into leases and other rows, in the order scanned (``streams``: a
    multi-stream application's, ``lease.not_a_lease``)."""
    leases: list[Lease] = []
    others: list[OtherRow] = []
    for item in items:
        why = not_a_lease(item, streams)
        if why is None:
            leases.append(Lease.from_item(item))
        else:
            others.append(OtherRow.from_item(item, why))
    return TableScan(tuple(leases), tuple(others))


def _view(key: str, entity_type: str | None, item: Item) -> View | None:
    """Java's reading of the row (CoordinatorStateDAODelegate falls back on the
    well-known keys for a state row without entityType)."""
    if entity_type == LEADER or (entity_type is None and key == LEADER_KEY and "ownerName" in item):
        return leader_view(item)
    if entity_type == CLIENT_VERSION_MIGRATION or (entity_type is None and key == MIGRATION_KEY):
        return state_view(item, "cv")
    if entity_type == TABLE_MIGRATION or (entity_type is None and key == TABLE_MIGRATION_KEY):
        return state_view(item, "tm")
    if entity_type == WORKER_METRIC_STATS:
        return WorkerMetrics(
            worker_id=key,
            updated_at_s=_whole(item.get("lut"), "lut"),
            stats={name: tuple(_number(v, f"sts.{name}") for v in _list(values, f"sts.{name}"))
                   for name, values in _map(item, "sts").items()},
            operating_range={name: tuple(_whole(v, f"opr.{name}") for v in _list(values, f"opr.{name}"))
                             for name, values in _map(item, "opr").items()},
            support_code=_whole(item["sup"], "sup") if "sup" in item else None,
            support_updated_s=_whole(item["slu"], "slu") if "slu" in item else None,
            cores=_number(item[CORES], CORES) if CORES in item else None,
        )
    return None


def leader_view(item: Item) -> LockView:
    """The lock item as the lock client reads it: ``leaseDuration`` a whole number of ms as a string.

    >>> try:
    ...     leader_view({"ownerName": {"S": "w1"}, "leaseDuration": {"S": "2m"}, "recordVersionNumber": {"S": "r"}})
    ... except RowError as exc:
    ...     print(exc)
    leaseDuration '2m' is not a whole number
    """
    duration = _string(item.get("leaseDuration"), "leaseDuration")
    if not (duration.isascii() and duration.isdigit() and len(duration) <= 18):
        raise RowError(f"leaseDuration {quoted(duration)} is not a whole number")
    return LockView(_string(item.get("ownerName"), "ownerName"), int(duration),
                      _string(item.get("recordVersionNumber"), "recordVersionNumber"), _s(item, "isReleased") == "1")


def state_view(item: Item, name: str) -> CoordinatorState:
    """A state row (Migration3.0: ``cv``, TableMigration3.5: ``tm``) as Java's MigrationState reads it."""
    history = []
    for index, entry in enumerate(_list(item.get("h", {"L": []}), "h")):
        change = entry.get("M") if isinstance(entry, Mapping) else None
        if not isinstance(change, Mapping):
            raise RowError(f"h[{index}] is not a map")
        history.append(StateChange(_string(change.get(name), f"h[{index}].{name}"),
                                   _string(change.get("mb"), f"h[{index}].mb"),
                                   _whole(change.get("mts"), f"h[{index}].mts")))
    return CoordinatorState(_string(item.get(name), name), _string(item.get("mb"), "mb"),
                            _whole(item.get("mts"), "mts"), tuple(history))


def _s(item: Item, name: str) -> str | None:
    value = item.get(name)
    return value.get("S") if isinstance(value, Mapping) else None


def _typed(value: Any, kind: str, label: str) -> Any:
    if not isinstance(value, Mapping) or kind not in value:
        raise RowError(f"{label} is {'missing' if value is None else 'not ' + kind}")
    return value[kind]


def _string(value: Any, label: str) -> str:
    text = _typed(value, "S", label)
    if not isinstance(text, str):
        raise RowError(f"{label} is not a string")
    return text


def _whole(value: Any, label: str) -> int:
    """A whole number within Java's long (a 5,000-digit text is refused before ``int`` sees it)."""
    text = _typed(value, "N", label)
    digits = text.removeprefix("-") if isinstance(text, str) else ""
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 19 and -(2**63) <= int(text) < 2**63):
        raise RowError(f"{label} {quoted(str(text))} is not a whole number")
    return int(text)


def _number(value: Any, label: str) -> float:
    text = value.get("N") if isinstance(value, Mapping) else None
    try:
        number = float(text) if isinstance(text, str) and len(text) <= 64 else float("nan")
    except ValueError:
        number = float("nan")
    if not math.isfinite(number):
        raise RowError(f"{label} holds {quoted(str(text))}, not a number")
    return number


def _list(value: Any, label: str) -> list[Any]:
    items = value.get("L") if isinstance(value, Mapping) else None
    if not isinstance(items, list):
        raise RowError(f"{label} is not a list")
    return items


def _map(item: Item, name: str) -> Mapping[str, Any]:
    if name not in item:
        return {}
    value = item[name].get("M") if isinstance(item[name], Mapping) else None
    if not isinstance(value, Mapping):
        raise RowError(f"{name} is not a map")
    return value


def _utc(epoch_s: float) -> str:
    try:
        return datetime.fromtimestamp(epoch_s, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError, OSError):  # a whole number, but no date: shown as stored
        return f"{epoch_s:g} s since 1970"


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
