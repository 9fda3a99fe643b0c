"""The pool process: drives many shards, a thread each (``shard_worker.ShardDriver``): fetches a
shard, drives its processor child, writes its checkpoints."""
