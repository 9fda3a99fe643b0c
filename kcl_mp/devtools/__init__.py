"""Test, demo and benchmark tooling. The runtime never imports it (tests/unit/test_layering.py)."""
