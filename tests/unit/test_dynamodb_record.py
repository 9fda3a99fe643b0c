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
    # RecordObjectMapperTest's record (adapter 2.3.0): its date 1156377600 ms, its maps new HashMap<>(),
    # so the adapter writes them in the order they iterate: given here in that order, as a record
    # read from the service comes in the order it was sent
    record = {
        "eventID": "0d391139-b73a-44e3-b1f3-671be3d9973a", "eventName": "MODIFY", "eventVersion": "1.1",
        "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": 1156377.6,  # seconds, as the API sends it
            "Keys": {"hashKey": {"S": "hashKeyValue"}},
            "NewImage": {"newAttributeKey": {"S": "someValue"}, "hashKey": {"S": "hashKeyValue"}},
            "OldImage": {"hashKey": {"S": "hashKeyValue"}},
            "SequenceNumber": "TestString", "SizeBytes": 9223372036854775807, "StreamViewType": "NEW_AND_OLD_IMAGES",
        },
    }
    assert adapter_json(record) == (
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
        assert java_hashmap_order(keys) == out[n].split("\t"), keys


# What the adapter 2.0.1 (AWS SDK for Java 2.32.0) put in ``data`` for three records of the embedded
# emulator, run as tests/java/adapter-consumer; the records as boto3 read them from the same stream.
_WIRE = {"eventVersion": "1.1", "eventSource": "aws:dynamodb", "awsRegion": "us-east-1"}
_ITEM = {n: {"S": n} for n in ("zeta", "id", "name", "age", "alpha", "v", "pk")}
_CHANGED = {**_ITEM, "age": {"N": "3"}, "m": {"M": {"b": {"S": "x"}, "a": {"S": "y"}, "zz": {"N": "1"}}}}
_RECORDS = [
    {"eventID": "7261cde01cc84bb5b85b0b5e885108a6", "eventName": "INSERT", **_WIRE,
     "dynamodb": {"ApproximateCreationDateTime": 1795658397, "Keys": {"pk": {"S": "pk"}}, "NewImage": _ITEM,
                  "SequenceNumber": "100000000000000000000", "SizeBytes": 339,
                  "StreamViewType": "NEW_AND_OLD_IMAGES"}},
    {"eventID": "0d2931654f8a4d9ea2ffdbd242bd8631", "eventName": "MODIFY", **_WIRE,
     "dynamodb": {"ApproximateCreationDateTime": 1795658397, "Keys": {"pk": {"S": "pk"}}, "NewImage": _CHANGED,
                  "OldImage": _ITEM, "SequenceNumber": "100000000000000000100", "SizeBytes": 565,
                  "StreamViewType": "NEW_AND_OLD_IMAGES"}},
    {"eventID": "e7a2170e87d64d228068d02f3c05f1af", "eventName": "REMOVE", **_WIRE,
     "dynamodb": {"ApproximateCreationDateTime": 1795658397, "Keys": {"pk": {"S": "pk"}}, "OldImage": _CHANGED,
                  "SequenceNumber": "100000000000000000200", "SizeBytes": 404,
                  "StreamViewType": "NEW_AND_OLD_IMAGES"}},
]
_HEAD = '{"eventID":"%s","eventName":"%s","eventVersion":"1.1","eventSource":"aws:dynamodb","awsRegion":"us-east-1",'
_IMAGE = '{"zeta":{"S":"zeta"},"id":{"S":"id"},"name":{"S":"name"},"age":{"S":"age"},"alpha":{"S":"alpha"},' \
         '"v":{"S":"v"},"pk":{"S":"pk"}}'
_CHANGED_IMAGE = '{"zeta":{"S":"zeta"},"id":{"S":"id"},"name":{"S":"name"},"age":{"N":"3"},"alpha":{"S":"alpha"},' \
                 '"v":{"S":"v"},"pk":{"S":"pk"},"m":{"M":{"b":{"S":"x"},"a":{"S":"y"},"zz":{"N":"1"}}}}'
_TAIL = '"SequenceNumber":"%s","SizeBytes":%d,"StreamViewType":"NEW_AND_OLD_IMAGES"}}'
_JAVA = [
    _HEAD % ("7261cde01cc84bb5b85b0b5e885108a6", "INSERT") + '"dynamodb":{"ApproximateCreationDateTime":1795658397000,'
    '"Keys":{"pk":{"S":"pk"}},"NewImage":' + _IMAGE + ',"OldImage":{},' + _TAIL % ("100000000000000000000", 339),
    _HEAD % ("0d2931654f8a4d9ea2ffdbd242bd8631", "MODIFY") + '"dynamodb":{"ApproximateCreationDateTime":1795658397000,'
    '"Keys":{"pk":{"S":"pk"}},"NewImage":' + _CHANGED_IMAGE + ',"OldImage":' + _IMAGE + ','
    + _TAIL % ("100000000000000000100", 565),
    _HEAD % ("e7a2170e87d64d228068d02f3c05f1af", "REMOVE") + '"dynamodb":{"ApproximateCreationDateTime":1795658397000,'
    '"Keys":{"pk":{"S":"pk"}},"NewImage":{},"OldImage":' + _CHANGED_IMAGE + ','
    + _TAIL % ("100000000000000000200", 404),
]


def test_the_bytes_the_adapter_2x_wrote_running():
    """Maps in the order the service sent them, nested ones too; a missing image as {}."""
    assert [adapter_json(r).decode() for r in _RECORDS] == _JAVA


def test_the_1x_daemons_records_keep_hashmap_order_and_leave_a_missing_image_out():
    inserted = json.loads(adapter_json(_RECORDS[0], v1=True))["dynamodb"]
    assert "OldImage" not in inserted
    assert list(inserted["NewImage"]) == java_hashmap_order(_ITEM) == ["zeta", "v", "alpha", "name", "id", "pk", "age"]
