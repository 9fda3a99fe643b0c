"""The worked examples in kcl_mp's docstrings are run, so they stay true."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "kcl_mp"
WITH_EXAMPLES = sorted(".".join(path.relative_to(PACKAGE).with_suffix("").parts) for path in PACKAGE.rglob("*.py")
                       if "processors" not in path.parts and ">>>" in path.read_text())


def test_the_examples_are_found():
    assert {"backoff", "supervisor.restart_policy", "leases.shard_sync", "multilang.wire"} <= set(WITH_EXAMPLES)


@pytest.mark.parametrize("module", WITH_EXAMPLES)
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(f"kcl_mp.{module}"))
    assert result.attempted > 0 and result.failed == 0, result
