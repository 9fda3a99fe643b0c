"""DynamoDB's item attributes written into moto's answers directly, not member by member.

moto writes each answer by walking the operation's output shape, and an ``AttributeValue``
is a structure of ten members (S, N, B, SS, NS, BS, M, L, NULL, BOOL), each looked up under
its aliases: about 0.12 ms of CPU a value, 1.4 ms an 11-attribute lease item. A Scan of a
12-lease table cost moto 19 ms of CPU, a Scan of 64 leases 93 ms, and every host scans its
lease table and every test polls it; in the tests' first phase Scans were a third of moto's
request CPU. Here an ``AttributeValue`` (a dict, as moto's DynamoDB answers hold them) is
written as that walk writes it: its members in the shape's order, a missing or None member
left out, strings and string sets through ``str``, binaries and binary sets in base64, maps
and lists value by value. Everything else is moto's own serializer. tests/unit/
test_moto_answers.py holds moto's own answers for every attribute type against these.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SHAPE = "AttributeValue"


class _NotPlain(Exception):
    """A value inside an attribute value that is not a plain dict: moto's walk writes it."""


def install() -> None:
    """Once per process: moto's JSON serializer writes attribute values with :func:`written`."""
    from moto.core.serialize import BaseJSONSerializer

    structure: Callable[..., None] = BaseJSONSerializer._serialize_type_structure
    if getattr(structure, "attribute_values", False):
        return

    def serialize_structure(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        if shape.name == SHAPE and isinstance(value, dict):
            try:
                self._default_serialize(serialized, written(value, self._base64), shape, key)
                return
            except _NotPlain:
                pass
        structure(self, serialized, value, shape, key)

    serialize_structure.attribute_values = True  # type: ignore[attr-defined]
    BaseJSONSerializer._serialize_type_structure = serialize_structure  # type: ignore[method-assign]


def _string(value: Any) -> Any:
    return value if value in ({}, []) else str(value)


def _nested(value: Any, base64: Callable[[Any], str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _NotPlain()
    return written(value, base64)


def written(value: dict[str, Any], base64: Callable[[Any], str]) -> dict[str, Any]:
    """One attribute value as moto's shape walk writes it (``base64``: the serializer's own)."""
    out: dict[str, Any] = {}
    for member in ("S", "N", "B", "SS", "NS", "BS", "M", "L", "NULL", "BOOL"):
        item = value.get(member)
        if item is None:
            continue
        if member in ("S", "N"):
            out[member] = _string(item)
        elif member == "B":
            out[member] = base64(item)
        elif member in ("SS", "NS"):
            out[member] = [_string(x) for x in item]
        elif member == "BS":
            out[member] = [base64(x) for x in item]
        elif member == "M":
            out[member] = {k: _nested(v, base64) for k, v in item.items()}
        elif member == "L":
            out[member] = [_nested(v, base64) for v in item]
        else:
            out[member] = item
    return out
