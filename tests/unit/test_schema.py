"""multilang/schema: the JSON Schema of every protocol message. Every message of the golden
transcripts validates against its side's schema, and so does every line kcl-mp writes."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from jsonschema import Draft202012Validator

from kcl_mp.multilang import wire
from kcl_mp.sequence import ExtendedSequenceNumber

ROOT = Path(__file__).resolve().parents[2] / "multilang"
SCHEMA = json.loads((ROOT / "schema" / "multilang.schema.json").read_text())
Draft202012Validator.check_schema(SCHEMA)


def validator(side: str) -> Draft202012Validator:
    return Draft202012Validator({"$defs": SCHEMA["$defs"], "$ref": f"#/$defs/{side}"})


TO, FROM = validator("toProcessor"), validator("fromProcessor")
LINES = [(path.name, n, json.loads(line)) for path in sorted((ROOT / "vectors").glob("*.jsonl"))
         for n, line in enumerate(path.read_text().splitlines(), 1) if line.strip()]
MESSAGES = [(name, n, entry) for name, n, entry in LINES if entry.get("dir") in ("to_processor", "from_processor")
            and isinstance(entry.get("msg"), dict)]


@pytest.mark.parametrize("name,n,entry", MESSAGES, ids=[f"{name}:{n}" for name, n, _ in MESSAGES])
def test_every_vector_message_validates(name, n, entry):
    side = TO if entry["dir"] == "to_processor" else FROM
    errors = [e.message for e in side.iter_errors(entry["msg"])]
    if entry["dir"] == "from_processor" and entry["msg"].get("action") not in ("status", "checkpoint"):
        assert errors, "a line the daemon must skip is not a message"  # e.g. stdout noise that is JSON
        return
    assert not errors, errors


def test_the_vectors_cover_every_message():
    seen = {(e["dir"], e["msg"]["action"]) for _, _, e in MESSAGES}
    assert {("to_processor", a) for a in ("initialize", "processRecords", "leaseLost", "shardEnded",
                                          "shutdownRequested", "checkpoint")} <= seen
    assert {("from_processor", "status"), ("from_processor", "checkpoint")} <= seen


def test_what_kcl_mp_writes_validates():
    lines = [
        wire.encode_initialize("shardId-000000000001", ExtendedSequenceNumber("TRIM_HORIZON")),
        wire.encode_initialize("shardId-000000000001", ExtendedSequenceNumber("4959", 3)),
        wire.encode_checkpoint_reply("4959", None, None),
        wire.encode_checkpoint_reply(None, None, "ShutdownException"),
        wire.make_batch([("aGk=", "pk", "4959", 1700000000123, 0), ("aGk=", "pk", "4959", 1700000000123, 1)],
                        12).line,
        wire.make_batch([], None).line,
    ] + [wire.encode({"action": a}) for a in ("leaseLost", "shardEnded", "shutdownRequested")]
    for line in lines:
        message = orjson.loads(line)
        assert not [e.message for e in TO.iter_errors(message)], line


@pytest.mark.parametrize("bad", [
    {"action": "initialize", "shardId": "s"},  # kclpy raises KeyError without the checkpoint keys
    {"action": "processRecords", "records": [{"data": "aGk=", "partitionKey": "p", "sequenceNumber": "1",
                                              "approximateArrivalTimestamp": 1, "subSequenceNumber": 0}]},  # no action
    {"action": "shutdown", "reason": "TERMINATE"},  # KCL 1.x: never sent
    {"action": "checkpoint", "sequenceNumber": "1", "subSequenceNumber": None},  # a reply needs error
])
def test_malformed_daemon_messages_are_rejected(bad):
    assert list(TO.iter_errors(bad))


@pytest.mark.parametrize("bad", [
    {"action": "status"},
    {"action": "status", "responseFor": "processRecords", "extra": 1},
    {"action": "status", "responseFor": "shutdown"},
    {"action": "checkpoint", "sequenceNumber": "1", "error": "boom"},
])
def test_malformed_processor_messages_are_rejected(bad):
    assert list(FROM.iter_errors(bad))
