"""Arrow columns built from buffers read back as pyarrow.array builds them, and building them
imports no pandas (pyarrow.array does, on its first call: 1.9 s of a Spark worker's CPU)."""

import subprocess
import sys

import pyarrow as pa
import pytest

from kcl_mp.spark import arrow_columns as columns

TIMESTAMP = pa.timestamp("us", tz="UTC")


@pytest.mark.parametrize("values", [[], [""], ["pk-1", "", "a" * 300], ["é", "x", "日本", ""], ["49600000000000000001"]])
def test_strings(values):
    built = columns.string(values)
    built.validate(full=True)
    assert built.equals(pa.array(values, pa.string()))


@pytest.mark.parametrize("values", [[], [b""], [b"\x00\xff" * 600, b"", b"x"]])
def test_binary(values):
    built = columns.binary(values)
    built.validate(full=True)
    assert built.equals(pa.array(values, pa.binary()))


@pytest.mark.parametrize("value, n", [("shardId-000000000001", 3), ("", 2), ("é", 1), ("s", 0)])
def test_repeated(value, n):
    built = columns.repeated(value, n)
    built.validate(full=True)
    assert built.equals(pa.array([value] * n, pa.string()))


@pytest.mark.parametrize("values, type", [([], pa.int64()), ([0, -1, 2**63 - 1], pa.int64()),
                                          ([1_764_250_000_123_000, 0], TIMESTAMP)])
def test_int64(values, type):
    built = columns.int64(values, type)
    built.validate(full=True)
    assert built.equals(pa.array(values, type))


def test_building_a_batch_imports_no_pandas():
    code = ("import sys, base64\n"
            "from kcl_mp.spark import kinesis_read as k, kinesis_rows\n"
            "take = k.ShardTake('s', 'shardId-0', (0, 2**128 - 1), {'at': 'TRIM_HORIZON'}, 1)\n"
            "records = [{'SequenceNumber': str(10 + i), 'ApproximateArrivalTimestamp': 1764250000.5, "
            "'Data': base64.b64encode(b'x' * i).decode(), 'PartitionKey': f'k{i}'} for i in range(3)]\n"
            "batches = list(kinesis_rows.rows(take, records))\n"
            "assert sum(b.num_rows for b in batches) == 3\n"
            "print('pandas' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
