"""The judge of a fault run (fault_run.py): pure, from the run's ``Facts`` to figures and a
list of failures.

Ground truth: the producer's puts (what Kinesis acknowledged), every processor's recorded
lines (each record with the wall-clock time its processor handled it), the hosts' JSON logs
(the lease timeline) and the times the faults were injected.

The rules:
- Nothing lost: every record put is delivered at least once.
- Per-key order: for each partition key, the first deliveries, in the order they happened,
  follow the order the records were put (so across a reshard a child's records come after
  its parents'); only records routed by their own key count (not the riders of an aggregate).
- Who holds a lease when: every ownership change is a conditional write, so the hosts' JSON
  logs give one order per lease: it is held by H from H's event that acquires it (``ACQUIRED``:
  lease_taken, lease_stolen, lease_rescued, lease_forced, lease_handed_in, lease_kept) until
  another host's such event, or H's own that lets it go (``RELEASED``: lease_handed_off,
  lease_released, lease_given_up; then by nobody).
- No delivery by a non-holder: a record handled by H's processor at time t is a non-holder
  delivery when H held the lease at no moment of [t - TOLERANCE_S, t]. The tolerance covers
  what the recorder's time stamps lag behind the moment kcl-mp handed the batch over (the
  driver has one batch of at most maxRecords in flight; the processor stamps each record as
  it handles it) and the logs' millisecond stamps. A take is logged after its write returned,
  which only makes the check more lenient, never stricter.
- Every duplicate explained: the second and later deliveries of a record must come from a
  different processor that started from the shard's last saved checkpoint (none recorded as
  saved before its initialize is further), below the record (the record was not checkpointed
  yet), after the processor that delivered it before ended by a fault: killed
  (processor or whole host), its host paused past failover, or its lease lost. A duplicate
  that is a non-holder delivery is counted as such. Anything else is unexplained.
- No checkpoint backwards: the table monitor saw none, and per shard the successful
  checkpoints the processors recorded never go back.
- Clean exits: every host exits 0 after SIGTERM at the end.
- Recovery per fault: for each host killed or paused and each processor killed, the time from
  the fault to the next delivery of each shard it was delivering (failover_run.recovery: by
  a processor started after the fault, or after a pause by the paused host's own once it went
  on, when nobody had taken the shard yet: test_failover holds a paused leader's takeover to
  its bound), within failover + one assignment interval + 10 s (``RECOVERY_BOUND_S``).
- No ERROR line for a fault kcl-mp recovers from by itself: the only ones allowed are those of
  a shard whose processor was killed, within ``KILLED_ERRORS_S`` of the kill.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from kcl_mp.logs import LeaseEvent

from .failover_run import Delivery, recovery
from .fault_run import FAILOVER_MS, Facts
from .harness import log_lines

TOLERANCE_S = 0.5
RECOVERY_BOUND_S = FAILOVER_MS / 1000 + 2 * FAILOVER_MS / 1000 + 10.0  # failover + an assignment interval + 10 s
KILLED_ERRORS_S = 15.0
ACQUIRED = {e.value for e in (LeaseEvent.TAKEN, LeaseEvent.RESCUED, LeaseEvent.FORCED, LeaseEvent.STOLEN,
                               LeaseEvent.HANDED_IN, LeaseEvent.KEPT)}
RELEASED = {e.value for e in (LeaseEvent.HANDED_OFF, LeaseEvent.RELEASED, LeaseEvent.GIVEN_UP)}
BEFORE_ALL, AFTER_ALL = (-1, 0), (10 ** 80, 0)  # sequence numbers have 56 digits


def position(seq: object, sub: object = 0) -> tuple[int, int]:
    """A sequence number (or the initialize checkpoint's sentinel) as a comparable pair."""
    if seq in (None, "SHARD_END"):
        return AFTER_ALL
    if not str(seq).isdigit():  # TRIM_HORIZON, LATEST, AT_TIMESTAMP: before every record
        return BEFORE_ALL
    return (int(seq), int(sub or 0))


@dataclass
class Processor:
    shard: str
    pid: int
    host: str = "?"
    started_at: float = 0.0
    start: tuple[int, int] = BEFORE_ALL
    events: list[str] = field(default_factory=list)
    last_at: float = 0.0


@dataclass
class Verdict:
    figures: dict
    failures: list[str]
    details: list[str]


def clock(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%H:%M:%S.%f")[:-3]


def lease_timeline(logs: dict[str, str]) -> dict[str, list[tuple[float, str | None]]]:
    """Per lease, (time, holder) at each ownership change the hosts logged, in time order. A
    release counts only while its host holds the lease: a handoff's new owner may log that it
    has the lease before the old owner logs that it let go (each logs after its own call)."""
    events: dict[str, list[tuple[float, str, bool]]] = defaultdict(list)
    for host, text in logs.items():
        for t, entry in log_lines(text):
            if entry.get("event") in ACQUIRED or entry.get("event") in RELEASED:
                events[entry["lease"]].append((t, host, entry["event"] in ACQUIRED))
    timeline: dict[str, list[tuple[float, str | None]]] = {}
    for key, found in events.items():
        holder: str | None = None
        changes = timeline[key] = []
        for t, host, acquired in sorted(found):
            if acquired or holder == host:
                holder = host if acquired else None
                changes.append((t, holder))
    return timeline


def held_within(timeline: list[tuple[float, str | None]], host: str, start: float, end: float) -> bool:
    """Did ``host`` hold the lease at any moment of [start, end]?"""
    times = [t for t, _ in timeline]
    i = bisect.bisect_right(times, start) - 1
    if i >= 0 and timeline[i][1] == host:
        return True
    return any(holder == host for t, holder in timeline[i + 1:bisect.bisect_right(times, end)])


def processors(entries: list[dict]) -> dict[tuple[str, int], Processor]:
    found: dict[tuple[str, int], Processor] = {}
    for e in entries:
        p = found.setdefault((e["_shard"], e["_pid"]), Processor(e["_shard"], e["_pid"]))
        p.last_at = max(p.last_at, e["at"])
        if e.get("event") == "initialize":
            p.host, p.started_at, p.start = e.get("host") or "?", e["at"], position(e["seq"], e["sub"])
        elif "event" in e:
            p.events.append(e["event"])
    return found


class Run:
    """One run's facts, read once: its processors, its records in time order, its lease timeline."""

    def __init__(self, facts: Facts):
        self.facts = facts
        self.procs = processors(facts.entries)
        self.records = sorted((e for e in facts.entries if "event" not in e), key=lambda e: e["at"])
        self.timeline = lease_timeline(facts.logs)
        self.put_order = {p.data: i for i, p in enumerate(facts.puts)}
        self.pauses = [i for i in facts.injected if i["action"] == "pause_host"]

    def host(self, e: dict) -> str:
        return self.procs[(e["_shard"], e["_pid"])].host


def judge(facts: Facts) -> Verdict:
    run = Run(facts)
    failures: list[str] = []
    details: list[str] = []
    delivered = {e["data"] for e in run.records}
    lost = [d for d in run.put_order if d not in delivered]
    if lost:
        failures.append(f"{len(lost)} of {len(run.put_order)} records never delivered, e.g. {lost[:5]}")
    non_holder = non_holder_deliveries(run)
    details += explain_non_holders(run, non_holder)
    processors_non_holder = len({(e["_shard"], e["_pid"]) for e in non_holder})
    if non_holder:
        failures.append(f"{len(non_holder)} deliveries by a host that did not hold the lease "
                        f"({processors_non_holder} processors; see the details)")
    causes, unexplained = duplicates(run, {id(e) for e in non_holder})
    if unexplained:
        failures.append(f"{sum(unexplained.values())} unexplained duplicates: {dict(unexplained)}")
    disorder, crossed = key_order(run)
    if disorder:
        failures.append(f"{len(disorder)} keys delivered out of order (first deliveries), e.g. {disorder[:5]}")
    backwards = checkpoints_backwards(run)
    if backwards:
        failures.append(f"checkpoints went backwards: {backwards[:5]}")
    recovered = recovery_per_fault(run)
    slow = {fault: s for fault, s in recovered.items() if s is not None and s > RECOVERY_BOUND_S}
    if slow:
        failures.append(f"recovery over {RECOVERY_BOUND_S:.0f} s: {slow}")
    errors = errors_logged(facts)
    if errors:
        failures.append(f"{len(errors)} ERROR lines for faults kcl-mp recovers from: {errors[:10]}")
    unclean = {host: code for host, code in facts.exit_codes.items() if code != 0}
    if unclean or len(facts.exit_codes) < len(facts.logs):
        failures.append(f"hosts did not exit 0 after SIGTERM: {unclean or facts.exit_codes}")
    return Verdict({**figures(run, lost, causes, unexplained, non_holder, processors_non_holder, crossed, backwards),
                    "recovery_s": recovered, "errors_logged": errors}, failures, details)


def recovery_per_fault(run: Run) -> dict[str, float | None]:
    """Per host killed or paused and processor killed: the longest time from the fault to the
    next delivery of a shard it was delivering (None: a shard never delivered again, as when a
    reshard ended it; the other rules judge that)."""
    found = sorted((Delivery(e["_shard"], run.host(e), e["_pid"], e.get("got") or e["at"]) for e in run.records),
                   key=lambda d: d.at)
    out: dict[str, float | None] = {}
    for i in run.facts.injected:
        if i["action"] not in ("kill_host", "pause_host", "kill_processor") or "pids" not in i:
            continue
        shards = recovery(found, i["host"], i["t"], i["until"] if i["action"] == "pause_host" else None)
        if i["action"] == "kill_processor":
            shards = {k: v for k, v in shards.items() if k == i.get("shard")}
        label = f"{i['action']} {i['host']}{' ' + i['shard'] if 'shard' in i else ''} at {i['t'] - run.facts.began:.0f} s"
        out[label] = None if not shards or None in shards.values() else max(v for v in shards.values() if v is not None)
    return out


def non_holder_deliveries(run: Run) -> list[dict]:
    return [e for e in run.records
            if not held_within(run.timeline.get(e["_shard"], []), run.host(e), e["at"] - TOLERANCE_S, e["at"])]


def explain_non_holders(run: Run, non_holder: list[dict]) -> list[str]:
    """Per processor: what it handled when, who had taken the lease, when its host learnt."""
    by_processor: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for e in non_holder:
        by_processor[(e["_shard"], e["_pid"])].append(e)
    details = []
    for (shard, pid), got in sorted(by_processor.items()):
        host = run.procs[(shard, pid)].host
        taken = [(t, h) for t, h in run.timeline.get(shard, []) if t <= got[0]["at"] and h != host]
        resumed = [p["until"] for p in run.pauses if p["host"] == host and -TOLERANCE_S <= got[0]["at"] - p["until"] < 5.0]
        learnt = [t for t, e in log_lines(run.facts.logs.get(host, "")) if t >= taken[-1][0] and
                  e.get("event") == LeaseEvent.LOST and e.get("lease") == shard] if taken else []
        details.append(
            f"non-holder: {host} (processor pid {pid}) handled {len(got)} records of {shard} at "
            f"{clock(got[0]['at'])}-{clock(got[-1]['at'])}; {taken[-1][1] if taken else '?'} had taken the lease "
            f"at {clock(taken[-1][0]) if taken else '?'}; {host} logged 'lost lease' at "
            f"{clock(learnt[0]) if learnt else 'never'}"
            + (f"; {got[0]['at'] - resumed[-1]:.2f} s after {host} resumed from its pause" if resumed else
               "; no pause of this host (its renewals were late)"))
    return details


def duplicates(run: Run, non_holder: set[int]) -> tuple[Counter, Counter]:
    """Every second and later delivery of a record: (explained ones by cause, unexplained ones)."""
    killed = {pid: i["action"] for i in run.facts.injected if i["action"] in ("kill_processor", "kill_host")
              for pid in i.get("pids", [])}
    saved = sorted((e["at"], e["_shard"], position(e["seq"], e["sub"])) for e in run.facts.entries
                   if e.get("event") == "checkpoint" and not e["error"])

    def last_checkpoint(p: Processor) -> tuple[int, int]:
        """The furthest checkpoint of the shard a processor recorded as saved before ``p`` started."""
        return max((at for t, shard, at in saved if shard == p.shard and t < p.started_at), default=BEFORE_ALL)

    def paused(host: str, delivered_at: float, restarted_at: float) -> bool:
        """Delivered by ``host`` before it resumed, again by a processor started after it stopped."""
        return any(p["host"] == host and delivered_at <= p["until"] + TOLERANCE_S and restarted_at >= p["t"]
                   for p in run.pauses)

    causes: Counter = Counter()
    unexplained: Counter = Counter()
    history: dict[str, list[dict]] = defaultdict(list)
    for e in run.records:
        history[e["data"]].append(e)
    for seen in history.values():
        for before, again in zip(seen, seen[1:]):
            prev, this = run.procs[(before["_shard"], before["_pid"])], run.procs[(again["_shard"], again["_pid"])]
            if id(again) in non_holder:
                causes["non-holder delivery"] += 1
            elif prev is this:
                unexplained[f"twice by one processor ({this.shard} pid {this.pid} on {this.host})"] += 1
            elif position(again["seq"], again["sub"]) <= this.start:
                unexplained[f"at or below its processor's start checkpoint ({this.shard} pid {this.pid})"] += 1
            elif this.start < last_checkpoint(this):
                unexplained[f"its processor started behind the last checkpoint ({this.shard} pid {this.pid})"] += 1
            elif prev.pid in killed:
                causes["processor killed" if killed[prev.pid] == "kill_processor" else "host killed"] += 1
            elif paused(prev.host, before["at"], this.started_at):
                causes["host paused past failover"] += 1
            elif "leaseLost" in prev.events:
                causes["lease lost"] += 1
            else:
                unexplained[f"after {prev.shard} pid {prev.pid} on {prev.host} ended ({', '.join(prev.events[-3:])})"
                            f" -> pid {this.pid} on {this.host}"] += 1
    return causes, unexplained


def key_order(run: Run) -> tuple[list[str], int]:
    """Keys whose first deliveries do not follow the put order, and how many keys crossed from a
    parent shard to a child. Only records routed by their own key count: an aggregate is routed
    by its first user record's key; the others ride along, into a shard their key may not hash
    to when the producer's shard map is stale around a reshard (as the KPL's can be)."""
    routed = {p.data for p in run.facts.puts if p.sub_sequence_number == 0}
    first: dict[str, list[int]] = defaultdict(list)
    shards_of: dict[str, set[str]] = defaultdict(set)
    done: set[str] = set()
    for e in run.records:
        if e["data"] in routed:
            shards_of[e["pk"]].add(e["_shard"])
            if e["data"] not in done:
                done.add(e["data"])
                first[e["pk"]].append(run.put_order[e["data"]])
    children = set(run.facts.shard_parents)
    crossed = sum(bool(got & run.facts.parents) and bool(got & children) for got in shards_of.values())
    return [key for key, order in first.items() if order != sorted(order)], crossed


def checkpoints_backwards(run: Run) -> list[str]:
    """What the table monitor saw go back, and per shard any saved checkpoint asked for after
    a higher one had been saved. Its reply time does not order it: a host paused between its
    write and the reply records the reply seconds later, after the next owner's checkpoints,
    though the write landed first (the next owner's take carries it). A processor asking again
    for the position it saved last (its shutdown checkpoint after a pause) writes nothing: the
    table does not move, so that is no checkpoint going back."""
    backwards = list(run.facts.backwards)
    saved: dict[str, list[tuple[float, tuple[int, int]]]] = defaultdict(list)  # (saved at, position)
    checkpoints = [e for e in run.facts.entries if e.get("event") == "checkpoint" and not e["error"]]
    for e in checkpoints:
        saved[e["_shard"]].append((e["at"], position(e["seq"], e["sub"])))
    repeated: set[tuple[int, tuple[int, int]]] = set()  # (pid, position) a processor had saved already
    for e in checkpoints:
        asked, at = e.get("asked", e["at"]), position(e["seq"], e["sub"])
        if (e["_pid"], at) in repeated:
            continue  # the value it saved last, asked again: answered without a write, as Java's advancePosition
        repeated.add((e["_pid"], at))
        before = [pos for saved_at, pos in saved[e["_shard"]] if saved_at < asked]
        if before and at < max(before):
            backwards.append(f"{e['_shard']}: pid {e['_pid']} checkpointed {e['seq']} after {max(before)}")
    return backwards


def figures(run: Run, lost: list[str], causes: Counter, unexplained: Counter, non_holder: list[dict],
            processors_non_holder: int, crossed: int, backwards: list[str]) -> dict:
    facts, injected = run.facts, run.facts.injected
    waits = longest_waits(run.records, facts.began)
    return {
        "seed": facts.seed, "seconds": round(facts.seconds), "put": len(run.put_order),
        "delivered": len({e["data"] for e in run.records}), "deliveries": len(run.records), "lost": len(lost),
        "duplicates": dict(causes), "unexplained": sum(unexplained.values()),
        "non_holder": len(non_holder), "non_holder_processors": processors_non_holder,
        "throttled": {s: c.get("throttled", 0) for s, c in facts.throttled.items()},
        "requests": {s: c.get("requests", 0) for s, c in facts.throttled.items()},
        "keys_crossed": crossed,
        "steps_done": sum("skipped" not in i for i in injected if i["action"] != "restart_host"),
        "splits": sum(i["action"] == "split" for i in injected),
        "merges": sum(i["action"] == "merge" for i in injected),
        "processor_kills": sum(i["action"] == "kill_processor" and "pids" in i for i in injected),
        "host_kills": sum(i["action"] == "kill_host" for i in injected), "pauses": len(run.pauses),
        "longest_wait": max(waits.items(), key=lambda kv: kv[1], default=("-", 0.0)), "waits": waits,
        "backwards": len(backwards), "exits": dict(facts.exit_codes),
        "leases_lost": leases_lost(facts),
    }


def longest_waits(records: list[dict], since: float) -> dict[str, float]:
    """Per shard, the longest a record that arrived after ``since`` (the warm-up) waited from
    its arrival in the stream (Kinesis's ApproximateArrivalTimestamp) to its first delivery, s:
    the longest time a shard with records to give had no processor taking them (a gap in the
    producer's puts is not counted)."""
    first: dict[str, dict] = {}
    for e in records:
        first.setdefault(e["data"], e)
    waits: dict[str, float] = defaultdict(float)
    for e in first.values():
        if e["ts"] / 1000 < since:
            continue
        waits[e["_shard"]] = max(waits[e["_shard"]], round(e["at"] - e["ts"] / 1000, 1))
    return dict(sorted(waits.items()))


def leases_lost(facts: Facts) -> dict[str, int]:
    """The hosts' "lost lease" lines: in all, and within a storm (or failover after it)."""
    storms = [(i["t"], i["until"] + FAILOVER_MS / 1000) for i in facts.injected if i["action"] == "storm"]
    lost = [t for text in facts.logs.values() for t, e in log_lines(text) if e.get("event") == LeaseEvent.LOST]
    return {"all": len(lost), "in_storm": sum(any(a <= t <= b for a, b in storms) for t in lost)}


def errors_logged(facts: Facts) -> list[str]:
    """The hosts' ERROR lines other than those of a shard whose processor was killed, logged
    within KILLED_ERRORS_S of the kill."""
    kills = [(i["t"], i["shard"]) for i in facts.injected if i["action"] == "kill_processor" and "shard" in i]
    out = []
    for host, text in facts.logs.items():
        for t, entry in log_lines(text):
            msg, shard = entry.get("msg", ""), entry.get("shard", "-")
            if entry.get("level") != "ERROR" or any(
                    0 <= t - at <= KILLED_ERRORS_S and (shard == killed or killed in msg) for at, killed in kills):
                continue
            out.append(f"{host} {entry['ts']} {shard}: {msg[:200]}")
    return out
