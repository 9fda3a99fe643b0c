"""One lease's life in the lease table: its model and rows, the table and its conditions, the
owner index, taking and stealing (balance), renewing, throughput, fencing, and shard sync."""
