"""GetRecords answers and SubscribeToShard events as the wire's JSON, without botocore's
walk over every record.

botocore parses a response by walking its output shape: for GetRecords that is a Python
call per field of every record (profiled: 39 % of a busy shard driver's CPU, and another
6 % in the stdlib's JSON decoder), only to hand back what the JSON already says. Here
``GetRecordsOutput`` is decoded by orjson and returned as it is: ``Data`` the wire's base64
text, ``ApproximateArrivalTimestamp`` its epoch-seconds number (what ``deaggregate``'s
fast path takes), every other key as sent. The same for the payload of each
``SubscribeToShardEvent`` of an enhanced fan-out subscription (measured, 1 KB records:
9.6 us of CPU a record in botocore's event-stream parsing with blobs kept, of which the walk
and the stdlib's decoder are most; the framing and its CRCs stay botocore's).

Everything else stays botocore's: signing, endpoint, credentials and their refresh,
retries (a throttled or failed GetRecords is a status >= 300, parsed by botocore's own
error parser, so ``aws.errors.translate`` sees the same ClientError codes), timeouts, and
every other operation's and event's parsing (errors in an event stream included). The
parser is chosen per response, in ``Endpoint._do_get_response``, from the client's
``response_parser_factory``: a session component, so only the clients of a session
given this factory (``clients.client(..., raw_records=True)``) are affected.
"""

from __future__ import annotations

from typing import Any

import orjson
from botocore.parsers import EventStreamJSONParser, JSONParser, ResponseParserFactory

RAW_OUTPUTS = frozenset({"GetRecordsOutput"})
RAW_EVENTS = frozenset({"SubscribeToShardEvent"})


class RawEventParser(EventStreamJSONParser):
    """botocore's event parser, but a SubscribeToShardEvent's payload is decoded, not walked."""

    def _parse_payload(self, response: dict[str, Any], shape: Any, member_shapes: Any,
                       final_parsed: dict[str, Any]) -> None:
        if shape.name not in RAW_EVENTS:
            return super()._parse_payload(response, shape, member_shapes, final_parsed)
        body = response["body"]
        final_parsed.update(orjson.loads(body) if body else {})


class RawRecordsParser(JSONParser):
    """botocore's JSON parser, but a successful GetRecords answer is decoded, not walked,
    and so are the records events of a subscription."""

    EVENT_STREAM_PARSER_CLS = RawEventParser

    def _do_parse(self, response: dict[str, Any], shape: Any) -> dict[str, Any]:
        if shape is None or shape.name not in RAW_OUTPUTS:
            return super()._do_parse(response, shape)
        body = response["body"]
        parsed = orjson.loads(body) if body else {}
        self._inject_response_metadata(parsed, response["headers"])
        return parsed


class RawRecordsParserFactory(ResponseParserFactory):
    """The factory botocore asks for a parser per response: ours for the JSON protocol."""

    def create_parser(self, protocol_name: str) -> Any:
        if protocol_name == "json":
            return RawRecordsParser(**self._defaults)
        return super().create_parser(protocol_name)
