"""The host process: the loop that owns leases, starts shard workers and acts on their exits."""
