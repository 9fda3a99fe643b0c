"""The adapter's JSON of a DynamoDB stream record (kcl_mp.retrieval.dynamodb_record), byte for byte."""

from __future__ import annotations

import json
import random
import string
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from kcl_mp.retrieval.dynamodb_record import adapter_json, epoch_millis, java_hashmap_order, java_string_hash

JAVA_ORDER = Path(__file__).resolve().parents[1] / "fixtures" / "java" / "HashMapOrder.java"


def test_the_adapters_own_serializer_test_byte_for_byte():
    # RecordObjectMapperTest's record (adapter 2.3.0): its maps are new HashMap<>(), its date 1156377600 ms
    record = {
        "eventID": "0d391139-b73a-44e3-b1f3-671be3d9973a", "eventName": "MODIFY", "eventVersion": "1.1",
        "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": 1156377.6,  # seconds, as the API sends it
            "Keys": {"hashKey": {"S": "hashKeyValue"}},
            "NewImage": {"hashKey": {"S": "hashKeyValue"}, "newAttributeKey": {"S": "someValue"}},
            "OldImage": {"hashKey": {"S": "hashKeyValue"}},
            "SequenceNumber": "TestString", "SizeBytes": 9223372036854775807, "StreamViewType": "NEW_AND_OLD_IMAGES",
        },
    }
    assert adapter_json(record, presized=False) == (
        b'{"eventID":"0d391139-b73a-44e3-b1f3-671be3d9973a","eventName":"MODIFY","eventVersion":"1.1",'
        b'"eventSource":"aws:dynamodb","awsRegion":"us-east-1","dynamodb":{"ApproximateCreationDateTime":1156377600,'
        b'"Keys":{"hashKey":{"S":"hashKeyValue"}},"NewImage":{"newAttributeKey":{"S":"someValue"},'
        b'"hashKey":{"S":"hashKeyValue"}},"OldImage":{"hashKey":{"S":"hashKeyValue"}},"SequenceNumber":"TestString",'
        b'"SizeBytes":9223372036854775807,"StreamViewType":"NEW_AND_OLD_IMAGES"}}')


def test_every_kind_of_attribute_value_and_a_ttl_delete():
    stamp = datetime(2026, 11, 25, 12, 0, 1, tzinfo=timezone.utc)  # boto3 parses the API's seconds to this
    record = {
        "eventID": "e", "eventName": "REMOVE", "eventVersion": "1.1", "eventSource": "aws:dynamodb",
        "awsRegion": "eu-west-1", "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"},
        "dynamodb": {"ApproximateCreationDateTime": stamp, "Keys": {"k": {"N": "1"}}, "SequenceNumber": "1",
                     "SizeBytes": 10, "StreamViewType": "OLD_IMAGE",
                     "OldImage": {"b": {"B": b"\x01\x02\x03\x04\x05"}, "n": {"NULL": True}, "t": {"BOOL": False},
                                  "bs": {"BS": [b"\n\x14\x1e", b"(2<"]}, "ns": {"NS": ["1", "2"]},
                                  "m": {"M": {}}, "l": {"L": [{"S": "x"}, {"NS": ["3"]}]}, "s": {"S": "a\x1fb\\u00ab"}}},
    }
    text = adapter_json(record)
    parsed = json.loads(text)
    assert parsed["dynamodb"]["ApproximateCreationDateTime"] == 1795608001000
    assert parsed["dynamodb"]["OldImage"]["b"] == {"B": "AQIDBAU="}
    assert parsed["dynamodb"]["OldImage"]["bs"] == {"BS": ["ChQe", "KDI8"]}
    assert parsed["dynamodb"]["OldImage"]["l"] == {"L": [{"S": "x"}, {"NS": ["3"]}]}
    assert parsed["dynamodb"]["OldImage"]["s"] == {"S": "a\x1fb\\u00ab"}
    assert b'"a\\u001Fb\\\\u00ab"' in text  # Jackson's upper-case escape; the user's backslash kept
    assert list(parsed) == ["eventID", "eventName", "eventVersion", "eventSource", "awsRegion", "dynamodb",
                            "userIdentity"]
    assert list(parsed["userIdentity"]) == ["principalId", "type"]
    assert epoch_millis(1795608001) == epoch_millis(stamp) == 1795608001000


def test_string_hash_is_javas():
    assert java_string_hash("") == 0
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("\U0001F600") == (31 * 0xD83D + 0xDE00)  # UTF-16 code units


def test_hashmap_order_is_the_jvms():
    """The JVM itself (`make test` installs Java) orders random key sets as java_hashmap_order does."""
    rng = random.Random(7)
    alphabet = string.ascii_letters + string.digits + "_-.é😀"
    cases = [["Aa", "BB", "C"], ["newAttributeKey", "hashKey"]]
    for size in (1, 2, 3, 5, 12, 13, 25, 49, 100, 200):
        cases.append(list(dict.fromkeys("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
                                        for _ in range(size))))
    out = subprocess.run(["java", str(JAVA_ORDER)], input="\n".join("\t".join(c) for c in cases) + "\n",
                         capture_output=True, text=True, timeout=120, check=True).stdout.splitlines()
    for n, keys in enumerate(cases):
        assert java_hashmap_order(keys, presized=True) == out[2 * n].split("\t"), keys
        assert java_hashmap_order(keys, presized=False) == out[2 * n + 1].split("\t"), keys
