"""The conformance kit: ``kcl-mp check-processor -- CMD ARGS``.

Drives any processor executable through the scenarios of ``kit/conformance/
scenarios.json`` (daemon messages taken from the golden transcripts in ``kit/vectors``;
the kit is package data, so it works from a plain install, and the repository's
``multilang/`` links to it), one fresh child per scenario, with kcl-mp's own protocol driver,
so a processor is judged by exactly the code that will run it. Per scenario it prints PASS,
WARN or FAIL (``check_report`` decides) with the first divergence: the step, the
message sent, what went wrong, and every line Java would not take as the processor meant:
the line, its length and the reason.

After each status but the last the kit waits ``SETTLE_S`` before the next action, so that a
message the processor writes unasked right after a status (a checkpoint, typically) is
known as such; Java would read it only with the next action.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import os
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcl_mp.cli.check_report import Seen, late_shard_end, verdict
from kcl_mp.errors import EXIT_CONFIG, EXIT_OK, ConfigError, ProcessorError
from kcl_mp.multilang.child import ProcessorChild
from kcl_mp.multilang.wire import Batch, make_batch
from kcl_mp.sequence import ExtendedSequenceNumber

KIT = Path(__file__).resolve().parents[1] / "kit"
STEP_TIMEOUT_S = 30.0
SETTLE_S = 0.1


@dataclass
class Outcome:
    name: str
    verdict: str  # PASS, WARN or FAIL
    detail: str
    seconds: float
    checkpoints: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)


class _Recorder(logging.Handler):
    """Keeps the driver's last errors (the processor's stderr lines among them) for a report;
    what it says about stdout lines is in the notes."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: deque[str] = deque(maxlen=8)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage()[:300])


def load_scenarios(kit: Path = KIT) -> tuple[list[dict[str, Any]], float]:
    path = kit / "conformance" / "scenarios.json"
    try:
        spec = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"the conformance kit is not at {path} ({exc.strerror}); pass --kit DIR") from exc
    return spec["scenarios"], float(spec["exit_within_s"])


@functools.cache
def _daemon_messages(path: Path) -> tuple[dict[str, Any], ...]:
    """A transcript's daemon messages, each with its exact Java line as ``raw`` (read once)."""
    return tuple({**entry["msg"], "raw": entry["raw"]} for entry in map(json.loads, path.read_text().splitlines())
                 if entry.get("dir") == "to_processor")


def _vector_message(kit: Path, step: dict[str, Any]) -> dict[str, Any]:
    """The step's message, from a transcript or written inline."""
    if "vector" not in step:
        return {"action": step["action"]}
    path = kit / "vectors" / step["vector"]
    found = [message for message in _daemon_messages(path) if message["action"] == step["action"]]
    if len(found) < step.get("nth", 1):
        raise ConfigError(f"{path}: no daemon message {step['action']} number {step.get('nth', 1)}")
    return found[step.get("nth", 1) - 1]


def _batch(message: dict[str, Any]) -> Batch:
    records = message["records"]
    last = max((ExtendedSequenceNumber(r["sequenceNumber"], r["subSequenceNumber"]) for r in records), default=None)
    return Batch(message["raw"].encode() + b"\n", len(records), last, message.get("millisBehindLatest"))


def _generated(step: dict[str, Any]) -> Batch:
    data = base64.b64encode(os.urandom(step["bytes"])).decode()
    base = 49590338271490256608559692538361571095921575989136588898
    users = [(data, f"pk-{i % 100}", str(base + i), 1700000000000 + i, 0) for i in range(step["records"])]
    return make_batch(users, 0)


def _action(step: dict[str, Any]) -> str:
    return step.get("generate") or step["action"]


def run_scenario(command: Sequence[str], scenario: dict[str, Any], kit: Path, exit_within_s: float,
                 timeout_s: float = STEP_TIMEOUT_S) -> Outcome:
    errors = list(scenario.get("checkpoint_errors", ()))
    stored: list[str] = []

    def checkpointer(position: ExtendedSequenceNumber) -> str | None:
        if errors:
            return errors.pop(0)
        stored.append(str(position))
        return None

    handler = _Recorder()
    log = logging.getLogger(f"kcl_mp.conformance.{id(handler)}")
    log.propagate = False
    log.addHandler(handler)
    started = time.monotonic()
    steps = scenario["steps"]
    child: ProcessorChild | None = None
    seen: list[Seen] = []
    step_no, what = 0, "start"
    failure: str | None = None

    def gather(at: int, what: str) -> None:
        if child is not None:
            after = _action(steps[at]) if at < len(steps) else None
            seen.extend(Seen(at, what, after, note) for note in child.take_notes())

    try:
        for step_no, step in enumerate(steps, 1):
            message = None if "generate" in step else _vector_message(kit, step)
            what = _action(step)
            if child is None:
                if what != "initialize":
                    raise ValueError(f"scenario {scenario['name']!r} must start with initialize")
                child = ProcessorChild(tuple(command), message["shardId"], checkpointer, timeout_s, log)  # type: ignore[index]
                child.start()
            if what == "initialize":
                seq = message["sequenceNumber"]  # type: ignore[index]
                sub = message["subSequenceNumber"] or 0  # type: ignore[index]
                child.initialize(None if seq is None else ExtendedSequenceNumber(seq, sub))
            elif what == "processRecords":
                child.process_records(_generated(step) if message is None else _batch(message))
            elif what == "shutdownRequested":
                child.shutdown_requested()
            elif what == "leaseLost":
                child.lease_lost()
            elif what == "shardEnded":
                if not child.shard_ended():
                    child.close(exit_within_s)  # to read all it writes after the status
                    gather(step_no, what)
                    failure = ("the processor sent its checkpoint after the status for shardEnded: Java closes "
                               "stdin after that status and drains the line unread" if late_shard_end(seen) else
                               "the processor answered shardEnded without checkpointing the end of the shard")
                    failure += ": the shard would never finish and its children never start (PROTOCOL.md 6)"
                    break
            else:
                raise ValueError(f"unknown action {what!r} in scenario {scenario['name']!r}")
            if step_no < len(steps):
                time.sleep(SETTLE_S)
            gather(step_no, what)
        else:
            assert child is not None
            began = time.monotonic()
            code = child.close(exit_within_s)
            gather(step_no, what)  # what it wrote after its last status
            if code != 0 or time.monotonic() - began > exit_within_s + 0.5:
                how = f"exited with status {code}" if code is not None and code >= 0 else "did not exit by itself"
                step_no, what = step_no + 1, "stdin closed"
                failure = (f"after its last message and the end of its stdin the processor {how} "
                           f"(expected: exit 0 within {exit_within_s:g} s)")
    except ProcessorError as exc:
        gather(step_no, what)
        failure = str(exc)
    finally:
        if child is not None:
            child.close(0)
            gather(step_no, what)
        log.removeHandler(handler)
    seconds = time.monotonic() - started
    result, findings = verdict(failure, seen)
    if failure is None:
        return Outcome(scenario["name"], result, f"{len(stored)} checkpoint(s), exit 0", seconds, stored, findings)
    for s in seen:  # the notes are shown apart, line and reason
        failure = failure.replace(f"; {s.note.summary()}", "")
    tail = "".join(f"\n        | {line}" for line in handler.lines if line.split(": ", 1)[-1].strip() not in failure)
    return Outcome(scenario["name"], result, f"step {step_no} ({what}): {failure}{tail}", seconds, stored, findings)


def check_processor(command: Sequence[str], kit: Path = KIT, timeout_s: float = STEP_TIMEOUT_S,
                    only: str | None = None) -> list[Outcome]:
    scenarios, exit_within_s = load_scenarios(kit)
    chosen = [s for s in scenarios if only is None or only.lower() in s["name"].lower()]
    if not chosen:
        raise ConfigError(f"no scenario matches {only!r}; scenarios: {', '.join(s['name'] for s in scenarios)}")
    return [run_scenario(command, scenario, kit, exit_within_s, timeout_s) for scenario in chosen]


def render(command: Sequence[str], outcomes: list[Outcome]) -> str:
    lines = [f"check-processor: {len(outcomes)} scenarios against: {' '.join(command)}"]
    width = max(len(o.name) for o in outcomes)
    for o in outcomes:
        lines.append(f"  {o.verdict}  {o.name:<{width}}  {o.seconds:5.2f} s  {o.detail}")
        lines.extend(f"        {line}" for line in o.findings)
    count = {v: sum(o.verdict == v for o in outcomes) for v in ("PASS", "WARN", "FAIL")}
    lines.append(f"{count['PASS']} passed, {count['WARN']} warned, {count['FAIL']} failed")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(
        prog="kcl-mp check-processor",
        description="Drive a processor executable through the multilang conformance scenarios.",
        usage="kcl-mp check-processor [--only NAME] [--timeout S] [--strict] [--kit DIR] -- COMMAND [ARGS...]",
        epilog="examples:\n"
               "  kcl-mp check-processor -- python -m kcl_mp.processors.python.sample_processor\n"
               "  kcl-mp check-processor --strict --only shard -- node processors/nodejs/sample_processor.js",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", metavar="NAME", help="run the scenarios whose name contains NAME")
    p.add_argument("--timeout", type=float, default=STEP_TIMEOUT_S, metavar="S",
                   help=f"max wait for each message from the processor (default {STEP_TIMEOUT_S:g})")
    p.add_argument("--strict", action="store_true", help="exit 1 on a warning too, not only on a failure")
    p.add_argument("--kit", type=Path, default=KIT, metavar="DIR",
                   help="a kit folder holding conformance/ and vectors/ (default: the one installed with kcl-mp)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the processor command line, after --")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("the processor command is missing: kcl-mp check-processor -- COMMAND [ARGS...]")
    outcomes = check_processor(command, args.kit, args.timeout, args.only)
    print(render(command, outcomes), flush=True)
    failing = {"FAIL", "WARN"} if args.strict else {"FAIL"}
    return EXIT_CONFIG if any(o.verdict in failing for o in outcomes) else EXIT_OK
