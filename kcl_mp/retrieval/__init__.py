"""Reading a shard: GetRecords polling, enhanced fan-out, KPL de-aggregation."""
