"""Processors written with amazon_kclpy: ``python -m kcl_mp.processors.python.sample_processor``
or ``...parquet_sink``; each also runs as a script (``python processors/python/<name>.py``)."""
