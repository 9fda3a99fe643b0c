"""The fleet's client version (the ``Migration3.0`` state) and what kcl-mp does in each. Pure.

A Java KCL 3.x fleet keeps one coordinator-state item, ``Migration3.0``, whose ``cv`` says
how every worker coordinates (docs/kcl3-facts.md section 2 has the Java sources)::

    version                          takes/steals  leader        assigns  metrics  owner index
    CLIENT_VERSION_INIT (PHASE1)     2.x rules     deterministic no       no       no
    CLIENT_VERSION_2X                2.x rules     deterministic no       no       no
    CLIENT_VERSION_UPGRADE_FROM_2X   2.x rules     deterministic no       yes      create
    CLIENT_VERSION_3X_WITH_ROLLBACK  no            lock          leader   yes      use
    CLIENT_VERSION_3X                no            lock          leader   yes      create, wait

At start ``initial`` reads the item as Java's initializer does and says what to write when
the stored state is not the one the configuration leads to (create when absent, a
conditional update on ``cv`` otherwise). On every scan ``follow`` moves the worker along
the changes Java's monitors follow (flip, rollback, roll-forward) and ignores the others,
as Java does. ``ready_to_flip`` is the 2.x leader's test before it flips the fleet to 3.x.

Worked example: a new application (no item), ``clientVersionConfig`` left at its default
CLIENT_VERSION_CONFIG_3X: create cv CLIENT_VERSION_3X with one history entry
CLIENT_VERSION_INIT, both by this worker; the worker is a 3.x follower, leader if it wins
the lock. The same fleet with CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X: create
CLIENT_VERSION_UPGRADE_FROM_2X; the worker takes by the 2.x rules and publishes its metrics
until the 2.x leader flips cv to CLIENT_VERSION_3X_WITH_ROLLBACK, which every worker follows
at its next read.
"""

from __future__ import annotations

import enum
from collections.abc import Set
from dataclasses import dataclass

from kcl_mp.leases.rows import CoordinatorState

FLIP_STABILIZE_S = 600.0  # Scheduler: flipTo3XStabilizerTimeInSeconds, 10 minutes
MONITOR_INTERVAL_S = 60.0  # ClientVersionChangeMonitor and MigrationReadyMonitor


class ClientVersion(str, enum.Enum):
    INIT = "CLIENT_VERSION_INIT"
    UPGRADE_FROM_2X = "CLIENT_VERSION_UPGRADE_FROM_2X"
    V2X = "CLIENT_VERSION_2X"
    V3X_WITH_ROLLBACK = "CLIENT_VERSION_3X_WITH_ROLLBACK"
    V3X = "CLIENT_VERSION_3X"


CONFIG_3X = "CLIENT_VERSION_CONFIG_3X"
CONFIG_COMPATIBLE_WITH_2X = "CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X"
CONFIG_COMPATIBLE_WITH_2X_PHASE1 = "CLIENT_VERSION_CONFIG_COMPATIBLE_WITH_2X_PHASE1"
_FROM_CONFIG = {CONFIG_3X: ClientVersion.V3X, CONFIG_COMPATIBLE_WITH_2X: ClientVersion.UPGRADE_FROM_2X,
                CONFIG_COMPATIBLE_WITH_2X_PHASE1: ClientVersion.INIT}

# The changes each version's monitor acts on; any other value is logged and ignored.
_FOLLOWS = {
    ClientVersion.UPGRADE_FROM_2X: {ClientVersion.V2X, ClientVersion.V3X_WITH_ROLLBACK},
    ClientVersion.V3X_WITH_ROLLBACK: {ClientVersion.V2X, ClientVersion.V3X},
    ClientVersion.V2X: {ClientVersion.UPGRADE_FROM_2X},
}


@dataclass(frozen=True)
class Role:
    """What a worker does in a client version (the table in the module docstring)."""

    version: ClientVersion
    takes: bool  # takes and steals by the 2.x rules
    lock_leader: bool  # leader elected through the lock item; else the 2.x deterministic leader
    publishes_metrics: bool
    owner_index: str  # none; use (made while upgrading); create (no wait); wait (create, start once ACTIVE)

    @property
    def name(self) -> str:
        return "3.x follower (leader if it holds the lock)" if self.lock_leader else "2.x taker"


def role(version: ClientVersion) -> Role:
    """
    >>> role(ClientVersion.V3X_WITH_ROLLBACK).name
    '3.x follower (leader if it holds the lock)'
    """
    three = version in (ClientVersion.V3X, ClientVersion.V3X_WITH_ROLLBACK)
    metrics = three or version is ClientVersion.UPGRADE_FROM_2X
    index = {ClientVersion.V3X: "wait", ClientVersion.V3X_WITH_ROLLBACK: "use",
             ClientVersion.UPGRADE_FROM_2X: "create"}.get(version, "none")
    return Role(version, takes=not three, lock_leader=three, publishes_metrics=metrics, owner_index=index)


@dataclass(frozen=True)
class Write:
    """A write of the Migration3.0 item: ``expected_cv`` None = create if absent
    (``attribute_not_exists``), else update conditioned on ``cv = expected_cv``."""

    state: CoordinatorState
    expected_cv: str | None


@dataclass(frozen=True)
class InitialVersion:
    version: ClientVersion
    write: Write | None
    reason: str


def parse(value: str) -> ClientVersion:
    try:
        return ClientVersion(value)
    except ValueError:
        raise ValueError(f"Migration3.0 cv {value!r}: not a client version Java writes") from None


def set_version(state: CoordinatorState | None, version: ClientVersion, worker_id: str,
                now_ms: int) -> CoordinatorState:
    """The item after ``worker_id`` sets ``version`` (``CoordinatorState.moved_to``); an absent
    item counts as CLIENT_VERSION_INIT by this worker now, as Java's MigrationState starts.

    >>> s = set_version(None, ClientVersion.V3X, "w1", 5)
    >>> (s.value, s.modified_by, s.history)
    ('CLIENT_VERSION_3X', 'w1', (StateChange(value='CLIENT_VERSION_INIT', modified_by='w1', modified_at_ms=5),))
    """
    if state is None:
        state = CoordinatorState(ClientVersion.INIT.value, worker_id, now_ms, ())
    return state.moved_to(version.value, worker_id, now_ms)


def initial(state: CoordinatorState | None, config: str, worker_id: str, now_ms: int) -> InitialVersion:
    """The version a Java worker with ``clientVersionConfig = config`` starts in, given the
    item read at start (None: absent), and the write that records it. A lost race on that
    write: read again and call this again (Java 3.1.3 retries so; 3.5 fails the start-up
    attempt and the Scheduler retries it)."""
    if config not in _FROM_CONFIG:
        raise ValueError(f"clientVersionConfig {config!r}: expected one of {sorted(_FROM_CONFIG)}")
    if state is None:
        version = _FROM_CONFIG[config]
        if version is ClientVersion.INIT:
            return InitialVersion(version, None, "no Migration3.0; phase 1 writes none and runs as 2.x")
        return InitialVersion(version, Write(set_version(None, version, worker_id, now_ms), None),
                              f"no Migration3.0: created as {version.value} from {config}")
    stored = parse(state.value)
    if stored is ClientVersion.V3X_WITH_ROLLBACK and config == CONFIG_3X:
        return InitialVersion(ClientVersion.V3X,
                              Write(set_version(state, ClientVersion.V3X, worker_id, now_ms), stored.value),
                              f"{stored.value} with {config}: the upgrade is final, "
                              f"cv set to {ClientVersion.V3X.value}")
    if stored is ClientVersion.INIT:  # as absent, but the write is an update of the INIT item
        version = _FROM_CONFIG[config]
        if version is ClientVersion.INIT:
            return InitialVersion(version, None, "Migration3.0 says CLIENT_VERSION_INIT; phase 1 runs as 2.x")
        return InitialVersion(version, Write(set_version(state, version, worker_id, now_ms), stored.value),
                              f"Migration3.0 says {stored.value}: set to {version.value} from {config}")
    return InitialVersion(stored, None, f"Migration3.0 says {stored.value}, set by {state.modified_by}")


@dataclass(frozen=True)
class Transition:
    version: ClientVersion
    changed: bool
    reason: str


def follow(current: ClientVersion, seen: CoordinatorState | None) -> Transition:
    """Where a worker in ``current`` goes when it reads ``seen`` (None: no item).

    >>> follow(ClientVersion.UPGRADE_FROM_2X, CoordinatorState("CLIENT_VERSION_3X_WITH_ROLLBACK", "j", 1, ())).reason
    'flip: CLIENT_VERSION_UPGRADE_FROM_2X -> CLIENT_VERSION_3X_WITH_ROLLBACK (set by j)'
    """
    if seen is None:
        return Transition(current, False, "no Migration3.0 item")
    try:
        stored = parse(seen.value)
    except ValueError as e:
        return Transition(current, False, f"{e}; staying in {current.value}")
    if stored is current:
        return Transition(current, False, f"unchanged {current.value}")
    if stored not in _FOLLOWS.get(current, ()):
        return Transition(current, False, f"{stored.value} is not a change {current.value} follows; ignored")
    kind = {ClientVersion.V2X: "rollback", ClientVersion.V3X_WITH_ROLLBACK: "flip",
            ClientVersion.UPGRADE_FROM_2X: "roll-forward", ClientVersion.V3X: "upgrade final"}[stored]
    return Transition(stored, True, f"{kind}: {current.value} -> {stored.value} (set by {seen.modified_by})")


def ready_to_flip(gsi_active: bool, lease_owners: Set[str], reporting: Set[str]) -> bool:
    """The 2.x leader's flip test (MigrationReadyMonitor): the owner index is ACTIVE and
    every lease owner has a live worker-metrics item. It flips once this has held for
    FLIP_STABILIZE_S, with ``flip`` below."""
    return gsi_active and set(lease_owners) <= set(reporting)


def flip(state: CoordinatorState, worker_id: str, now_ms: int) -> Write:
    """The flip to 3.x, conditioned on the item still saying CLIENT_VERSION_UPGRADE_FROM_2X."""
    return Write(set_version(state, ClientVersion.V3X_WITH_ROLLBACK, worker_id, now_ms),
                 ClientVersion.UPGRADE_FROM_2X.value)


SHUFFLE_SEED = 1947  # DeterministicShuffleShardSyncLeaderDecider.DETERMINISTIC_SHUFFLE_SEED


def _java_shuffle(items: list[str], seed: int) -> list[str]:
    """``Collections.shuffle(items, new java.util.Random(seed))``: Java's 48-bit LCG, so
    every worker, Java or kcl-mp, computes the same order."""
    mask = (1 << 48) - 1
    state = (seed ^ 0x5DEECE66D) & mask

    def next31() -> int:
        nonlocal state
        state = (state * 0x5DEECE66D + 0xB) & mask
        return state >> 17

    def next_int(bound: int) -> int:
        if bound & -bound == bound:
            return (bound * next31()) >> 31
        while True:
            bits = next31()
            value = bits % bound
            if bits - value + bound - 1 < 2**31:
                return value

    out = list(items)
    for i in range(len(out), 1, -1):
        j = next_int(i)
        out[i - 1], out[j] = out[j], out[i - 1]
    return out


def deterministic_leader(lease_owners: Set[str]) -> str | None:
    """The 2.x-rule leader (DeterministicShuffleShardSyncLeaderDecider, one periodic shard-sync
    worker): the distinct lease owners, sorted, shuffled with Java's Random(1947); the first.
    It runs the flip monitor in CLIENT_VERSION_UPGRADE_FROM_2X.

    >>> deterministic_leader(set())
    >>> deterministic_leader({"only"})
    'only'
    >>> _java_shuffle(["host-a", "host-b", "java-1", "kclmp-a", "kclmp-b", "x7"], SHUFFLE_SEED)  # Java 21's output
    ['java-1', 'kclmp-a', 'x7', 'kclmp-b', 'host-a', 'host-b']
    """
    owners = _java_shuffle(sorted(lease_owners), SHUFFLE_SEED)
    return owners[0] if owners else None
