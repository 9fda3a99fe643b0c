"""Two lookups moto repeats for every request, made once per process.

moto's server finds a request's backend by testing its Host header against the list of its
own modules, which it builds by listing its package directory (``backends.list_of_moto_modules``:
about 175 ``stat`` calls a request, 42 % of moto's CPU for an empty GetRecords), and then its
response class's method names through ``inspect.getmembers`` (6 %). Neither changes while the
server runs. Measured on moto 5.2 (a GetRecords of an empty shard): 5.6 ms of moto's CPU a
request before, about 3 ms after; the answers are moto's own.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable


def install() -> None:
    """Once per process: the module list computed once, the method names cached per class."""
    from moto import backends
    from moto.core import responses

    if getattr(backends.list_of_moto_modules, "cached", False):
        return
    modules = tuple(backends.list_of_moto_modules())

    def list_of_moto_modules() -> Iterable[str]:
        return modules

    list_of_moto_modules.cached = True  # type: ignore[attr-defined]
    backends.list_of_moto_modules = list_of_moto_modules
    responses.method_names_from_class = functools.cache(responses.method_names_from_class)
