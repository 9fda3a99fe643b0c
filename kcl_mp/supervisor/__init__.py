"""The host process: the loop that owns leases, hands shards to the pool processes and acts on their ends."""
