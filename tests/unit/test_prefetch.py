"""The read-ahead's bounds (retrieval.prefetch): Java's rule per shard, kcl-mp's budget per
pool process, and the queue that waits on them."""

from __future__ import annotations

import threading

import pytest

from kcl_mp.config import RetrievalSettings
from kcl_mp.retrieval.prefetch import PoolBudget, PrefetchQueue, Queued, admits

BOUNDS = RetrievalSettings(max_pending_process_records_input=3, max_byte_size=100, max_records_count=10,
                           worker_process_max_byte_size=250)


@pytest.mark.parametrize("queued, pool, size, expected", [
    (Queued(0, 0, 0), 0, 10_000, True),  # empty: a batch over every bound still goes (Java's rule)
    (Queued(2, 99, 9), 99, 10_000, True),  # below every bound: one more, whatever its size
    (Queued(3, 30, 3), 30, 1, False),  # maxPendingProcessRecordsInput
    (Queued(1, 100, 1), 100, 1, False),  # maxByteSize
    (Queued(1, 10, 10), 10, 1, False),  # maxRecordsCount
    (Queued(0, 0, 0), 250, 1, False),  # the pool's shards hold its budget: an empty shard waits too
    (Queued(1, 10, 1), 250, 0, True),  # a marker (shard end, failure) is never held back by bytes
    (Queued(3, 10, 1), 0, 0, False),  # ... but takes a place in the queue
])
def test_admits(queued, pool, size, expected):
    assert admits(queued, pool, size, BOUNDS) is expected


def test_a_full_queue_waits_until_its_consumer_takes():
    stop = threading.Event()
    q: PrefetchQueue[str] = PrefetchQueue(BOUNDS)
    assert q.put("a", 60, 1, stop) and q.put("b", 60, 1, stop)  # 120 bytes: full
    put = threading.Thread(target=q.put, args=("c", 1, 1, stop))
    put.start()
    put.join(0.5)
    assert put.is_alive() and q.queued == Queued(2, 120, 2)
    assert q.get(1.0) == "a"
    put.join(2.0)
    assert not put.is_alive() and q.queued == Queued(2, 61, 2)
    assert [q.get(0), q.get(0), q.get(0)] == ["b", "c", None]


def test_shards_of_one_pool_share_its_budget_and_get_it_back():
    stop = threading.Event()
    pool = PoolBudget()
    first, second = PrefetchQueue[str](BOUNDS, pool), PrefetchQueue[str](BOUNDS, pool)
    assert first.put("a", 90, 1, stop) and second.put("b", 90, 1, stop) and first.put("c", 90, 1, stop)
    assert pool.bytes == 270
    waiting = threading.Thread(target=second.put, args=("d", 10, 1, stop))
    waiting.start()
    waiting.join(0.5)
    assert waiting.is_alive()  # its own queue has room; the pool has none
    first.clear()  # that shard is done: what it read ahead goes back to the pool
    waiting.join(2.0)
    assert not waiting.is_alive() and pool.bytes == 100 and second.queued == Queued(2, 100, 2)


def test_a_put_waiting_for_room_ends_when_stopped():
    stop = threading.Event()
    q: PrefetchQueue[str] = PrefetchQueue(BOUNDS)
    q.put("a", 200, 1, stop)
    result: list[bool] = []
    put = threading.Thread(target=lambda: result.append(q.put("b", 1, 1, stop)))
    put.start()
    stop.set()
    put.join(2.0)
    assert result == [False] and q.queued == Queued(1, 200, 1)


def test_many_shards_of_one_pool_stay_within_its_budget_plus_one_batch():
    stop = threading.Event()
    pool = PoolBudget()
    queues = [PrefetchQueue[int](BOUNDS, pool) for _ in range(6)]
    seen: list[int] = []  # the pool's bytes after each put
    taken: list[list[int | None]] = []

    def produce(q: PrefetchQueue[int], seed: int) -> None:
        for n in range(60):
            q.put(n, 20 + (n * seed) % 80, 1, stop)
            with pool.lock:
                seen.append(pool.bytes)

    def consume(q: PrefetchQueue[int]) -> None:
        taken.append([q.get(5.0) for _ in range(60)])

    threads = [threading.Thread(target=produce, args=(q, i + 1)) for i, q in enumerate(queues)]
    threads += [threading.Thread(target=consume, args=(q,)) for q in queues]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30.0)
    assert not any(thread.is_alive() for thread in threads)
    assert taken == [list(range(60))] * 6  # in order, each once
    assert len(seen) == 360 and max(seen) < BOUNDS.worker_process_max_byte_size + 100 and pool.bytes == 0
