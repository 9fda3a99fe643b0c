"""The lease table and every decision about it: the lease, balancing, shard sync, renewals, fencing."""
