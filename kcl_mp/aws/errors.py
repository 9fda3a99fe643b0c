"""The one place botocore errors become kcl-mp errors.

Every call into AWS that can fail goes through ``call`` (or, where a loop must see the raw
error, ``translate``), so the rest of kcl-mp sees only ``errors.py``: an error code that is an
expected outcome (a lost conditional write, a table that does not exist) becomes a value the
caller names, anything else a DependencyError (or ThrottledError) naming what failed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar, overload

from botocore.exceptions import BotoCoreError, ClientError
from botocore.exceptions import ConnectionError as BotoConnectionError
from urllib3.exceptions import HTTPError as Urllib3Error  # a connection cut while a response streams

from kcl_mp.errors import DependencyError, ThrottledError

_THROTTLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "LimitExceededException",
        "RequestLimitExceeded",
        "KMSThrottlingException",
    }
)
_NOT_RETRIABLE_CODES = frozenset(
    {
        "ResourceNotFoundException",
        "AccessDeniedException",
        "UnrecognizedClientException",
        "ValidationException",
        "InvalidArgumentException",
        "IncompleteSignature",
        "InvalidSignatureException",
    }
)


CONDITION_FAILED = "ConditionalCheckFailedException"
NOT_FOUND = "ResourceNotFoundException"
IN_USE = "ResourceInUseException"

_T = TypeVar("_T")
_O = TypeVar("_O")


def error_code(exc: BaseException) -> str | None:
    if isinstance(exc, ClientError):
        return exc.response.get("Error", {}).get("Code")
    return None


def is_conditional_failure(exc: BaseException) -> bool:
    return error_code(exc) == CONDITION_FAILED


def translate(exc: BaseException, what: str) -> DependencyError:
    """A botocore error as a DependencyError (or ThrottledError) naming ``what`` failed."""
    code = error_code(exc)
    if code in _THROTTLE_CODES:
        return ThrottledError(f"{what}: throttled ({code})", code=code)
    if isinstance(exc, ClientError):
        message = exc.response.get("Error", {}).get("Message", "")
        return DependencyError(
            f"{what}: {code}: {message}".rstrip(": "), retriable=code not in _NOT_RETRIABLE_CODES, code=code
        )
    if isinstance(exc, (BotoConnectionError, BotoCoreError, OSError, Urllib3Error)):
        return DependencyError(f"{what}: {type(exc).__name__}: {exc}", code=type(exc).__name__)
    return DependencyError(f"{what}: {type(exc).__name__}: {exc}", retriable=False)


AWS_ERRORS: tuple[type[BaseException], ...] = (ClientError, BotoCoreError, OSError, Urllib3Error)


@overload
def call(what: str, request: Callable[[], _T]) -> _T: ...


@overload
def call(what: str, request: Callable[[], _T], outcomes: Mapping[str, _O]) -> _T | _O: ...


def call(what: str, request: Callable[[], _T], outcomes: Mapping[str, _O] | None = None) -> _T | _O:
    """``request()``'s answer; for an error whose code is in ``outcomes``, that code's value;
    any other error translated, naming ``what``."""
    try:
        return request()
    except AWS_ERRORS as exc:
        code = error_code(exc)
        if outcomes is not None and code is not None and code in outcomes:
            return outcomes[code]
        raise translate(exc, what) from exc
