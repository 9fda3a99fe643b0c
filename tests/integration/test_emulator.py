"""The embedded emulator linearizes DynamoDB's conditional writes, as DynamoDB does.

moto alone checks a write's condition and then writes without a lock, so under its threaded
server two concurrent takes of one lease could both succeed (two hosts both "took lease ...
(from nobody)"). Here several threads race a conditional UpdateItem on one item, trial after
trial, against ``start_emulator()`` as kcl-mp starts it: exactly one may win each trial.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import boto3
import pytest
from botocore.config import Config

from kcl_mp.embedded import start_emulator

pytestmark = pytest.mark.integration

WRITERS = 4
TRIALS = 300


def _client(url: str):
    return boto3.client("dynamodb", endpoint_url=url, region_name="us-east-1",
                        config=Config(retries={"max_attempts": 1}, max_pool_connections=2))


def _take(client, table: str, trial: int, writer: int, barrier: threading.Barrier) -> bool:
    """One conditional take of the lease: counter ``trial`` -> ``trial + 1``, as a host's take."""
    barrier.wait(timeout=60)
    try:
        client.update_item(
            TableName=table, Key={"leaseKey": {"S": "shardId-000000000004"}},
            UpdateExpression="SET leaseCounter = :next, leaseOwner = :me",
            ConditionExpression="leaseCounter = :seen",
            ExpressionAttributeValues={":seen": {"N": str(trial)}, ":next": {"N": str(trial + 1)},
                                       ":me": {"S": f"host-{writer}"}})
        return True
    except client.exceptions.ConditionalCheckFailedException:
        return False


@pytest.mark.parametrize("http2", [False, True], ids=["werkzeug", "hypercorn"])
def test_concurrent_conditional_writes_on_one_item_have_one_winner(tmp_path, http2):
    with start_emulator(log_path=str(tmp_path / "moto.log"), http2=http2) as emulator:
        clients = [_client(emulator.url) for _ in range(WRITERS)]
        table = "probe"
        clients[0].create_table(TableName=table, KeySchema=[{"AttributeName": "leaseKey", "KeyType": "HASH"}],
                                AttributeDefinitions=[{"AttributeName": "leaseKey", "AttributeType": "S"}],
                                BillingMode="PAY_PER_REQUEST")
        clients[0].put_item(TableName=table, Item={"leaseKey": {"S": "shardId-000000000004"},
                                                   "leaseCounter": {"N": "0"}})
        winners = []
        began = time.monotonic()
        with ThreadPoolExecutor(WRITERS) as pool:
            for trial in range(TRIALS):
                barrier = threading.Barrier(WRITERS)
                futures = [pool.submit(_take, clients[w], table, trial, w, barrier) for w in range(WRITERS)]
                winners.append(sum(f.result(timeout=120) for f in futures))
        elapsed = time.monotonic() - began
        item = clients[0].get_item(TableName=table, Key={"leaseKey": {"S": "shardId-000000000004"}},
                                   ConsistentRead=True)["Item"]
    doubled = [t for t, n in enumerate(winners) if n > 1]
    assert not doubled, (f"{len(doubled)} of {TRIALS} trials had more than one winner "
                         f"(trials {doubled[:10]}; {elapsed:.1f} s)")
    assert winners == [1] * TRIALS
    assert item["leaseCounter"] == {"N": str(TRIALS)}
    if not http2:  # moto's request log, as ``python -m moto.server`` writes it
        assert '"POST / HTTP/1.1" 200' in (tmp_path / "moto.log").read_text()
        assert emulator.process.returncode == 0  # SIGTERM ends it cleanly
