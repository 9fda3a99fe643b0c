"""The shard worker process: fetches a shard, drives its processor child, writes its checkpoints."""
