"""A member of a plain dict read directly in moto's JSON answers, not through its alias lookup.

moto writes an answer by walking the output shape, and finds each member's value by asking a
chain of alias providers (the member's name in snake_case, a shape-name prefix, a class-name
prefix ...), each built anew for every member of every record: 0.16 ms of CPU a Kinesis record
in a GetRecords answer, 0.23 ms in a PutRecords answer, most of it those lookups. For a plain
dict holding the member under its own name, with a scalar member (a structure or a list member
may go by its shape's name first) and moto's default providers with no transformer, that chain
answers ``value[name]``, so that is read directly here; everything else goes through moto's
lookup. tests/unit/test_moto_answers.py holds moto's own answers against these.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_ALIASED = frozenset({"structure", "list"})  # moto's ShapeNameAlias may name these by their shape


def install() -> None:
    """Once per process: moto's JSON serializers read plain members directly."""
    from moto.core import serialize

    original: Callable[..., None] = serialize.BaseJSONSerializer._serialize_structure_member
    if getattr(original, "plain_members", False):
        return
    pickers = (serialize.AttributePicker, serialize.XFormedAttributePicker)

    def plain(picker: Any) -> bool:
        if type(picker) is serialize.DefaultAttributePicker:
            return True
        return type(picker) in pickers and picker.alias_providers is serialize.DEFAULT_ALIAS_PROVIDERS \
            and not picker.response_transformers

    def member(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        if type(value) is dict and key in value and shape.type_name not in _ALIASED and plain(self._value_picker):
            found = value[key]
            if found is not None:
                self._serialize(serialized, found, shape, key)
            return
        original(self, serialized, value, shape, key)

    member.plain_members = True  # type: ignore[attr-defined]
    serialize.BaseJSONSerializer._serialize_structure_member = member  # type: ignore[method-assign]
