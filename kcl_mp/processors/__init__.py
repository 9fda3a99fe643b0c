"""The ready-made record processors, shipped in the wheel (the repository's processors/
points here): ``python/`` (amazon_kclpy, from the ``processors`` or ``sink`` extra),
``nodejs/`` (aws-kcl: ``npm ci`` beside it) and ``shell/`` (POSIX sh and jq).

The Python ones run from a plain install with ``python -m``:

    executableName = python -m kcl_mp.processors.python.sample_processor
    kcl-mp check-processor -- python -m kcl_mp.processors.python.sample_processor
"""
