"""The one place botocore errors become kcl-mp errors.

Every call into AWS that can fail goes through ``translate`` (or ``is_conditional_failure``
for the expected outcome of a lost race), so the rest of kcl-mp sees only ``errors.py``.
"""

from __future__ import annotations

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


def error_code(exc: BaseException) -> str | None:
    if isinstance(exc, ClientError):
        return exc.response.get("Error", {}).get("Code")
    return None


def is_conditional_failure(exc: BaseException) -> bool:
    return error_code(exc) == "ConditionalCheckFailedException"


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
