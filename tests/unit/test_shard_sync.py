from kcl_mp.config import InitialPosition
from kcl_mp.lease import Lease
from kcl_mp.shard_sync import Shard, plan_new_leases


def shard(i, parents=(), closed=False):
    return Shard(f"shardId-{i}", tuple(f"shardId-{p}" for p in parents), (i * 10, i * 10 + 9), "1",
                 "99" if closed else None)


def test_every_unleased_shard_gets_a_lease_at_the_initial_position():
    plan = plan_new_leases([shard(0), shard(1)], {"shardId-1": Lease("shardId-1")}, InitialPosition("TRIM_HORIZON"))
    assert [(l.key, l.checkpoint.sequence_number, l.hash_range) for l in plan] == [("shardId-0", "TRIM_HORIZON", (0, 9))]


def test_children_of_listed_parents_start_at_trim_horizon():
    plan = plan_new_leases([shard(0, closed=True), shard(1, parents=(0,))], {}, InitialPosition("LATEST"))
    assert [(l.key, l.checkpoint.sequence_number, l.parent_shard_ids) for l in plan] == [
        ("shardId-0", "LATEST", ()), ("shardId-1", "TRIM_HORIZON", ("shardId-0",))]


def test_from_api():
    s = Shard.from_api({"ShardId": "shardId-000000000002", "ParentShardId": "shardId-000000000000",
                        "AdjacentParentShardId": "shardId-000000000001",
                        "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "340282366920938463463374607431768211455"},
                        "SequenceNumberRange": {"StartingSequenceNumber": "1", "EndingSequenceNumber": "9"}})
    assert s.parent_shard_ids == ("shardId-000000000000", "shardId-000000000001") and s.is_closed
