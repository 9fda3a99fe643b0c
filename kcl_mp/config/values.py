"""The values of properties keys: one parser per kind of value, and the credential provider
chains (CONFIG.md section 5).

Parsers take the value with surrounding blanks removed and raise ``ValueError("expected
...")``; ``load_config`` adds key, value, file and line. They are stricter than Java on
purpose: Java turns an unparsable number into 0 and an unknown boolean into false, both
of which then silently mean "keep the default" (CONFIG.md section 3).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from typing import Any, get_args

from kcl_mp.config.settings import CredentialProvider, StreamKind

Parser = Callable[[str], Any]
INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


# --- parsers ---------------------------------------------------------------------------


def integer(lo: int, hi: int = LONG_MAX) -> Parser:
    expected = f"expected an integer between {lo} and {hi}" if hi != LONG_MAX else f"expected an integer >= {lo}"

    def parse(text: str) -> int:
        if not re.fullmatch(r"[+-]?\d+", text) or not lo <= int(text) <= hi:
            raise ValueError(expected)
        return int(text)

    return parse


def decimal(lo: float) -> Parser:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"expected a number >= {lo:g}") from None
        if not value >= lo:
            raise ValueError(f"expected a number >= {lo:g}")
        return value

    return parse


_TRUE = {"true", "yes", "y", "on", "1"}
_FALSE = {"false", "no", "n", "off", "0"}


def boolean(text: str) -> bool:
    """Java's spellings; anything else is an error here (Java reads it as false)."""
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise ValueError("expected true or false")


def choice(*values: str) -> Parser:
    """An enum, upper-cased before lookup as Java does (``trim_horizon`` works)."""

    def parse(text: str) -> str:
        if text.upper() not in values:
            raise ValueError(f"expected one of {', '.join(values)}")
        return text.upper()

    return parse


def choices_of(values: Any) -> Parser:
    """``choice`` over the values of a ``Literal`` type, so the type and the key say them once."""
    return choice(*get_args(values))


def text(value: str) -> str:
    if not value:
        raise ValueError("expected a non-empty value")
    return value


def command_words(value: str) -> tuple[str, ...]:
    """An ``executableName``: split on runs of spaces, as Java's daemon splits it (CONFIG.md section 4)."""
    return tuple(word for word in value.split(" ") if word)


def url(value: str) -> str:
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", value):
        raise ValueError("expected a URL with its scheme, like http://localhost:4566")
    return value


def region(value: str) -> str:
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", value):
        raise ValueError("expected a region name like us-east-1")
    return value


_STREAM_ARN = re.compile(r"arn:aws[a-z-]*:kinesis:[a-z0-9-]+:\d{12}:stream/([A-Za-z0-9_.-]{1,128})")
# A DynamoDB stream: the table's ARN, then /stream/ and the stream's label (a timestamp).
_DYNAMODB_STREAM_ARN = re.compile(r"arn:aws[a-z-]*:dynamodb:[a-z0-9-]+:\d{12}:table/([A-Za-z0-9_.-]{3,255})"
                                  r"/stream/([^/\s]+)")
_DYNAMODB_TABLE_ARN = re.compile(r"arn:aws[a-z-]*:dynamodb:[a-z0-9-]+:\d{12}:table/[A-Za-z0-9_.-]{3,255}")


def stream_arn(value: str) -> str:
    """A Kinesis stream's ARN or a DynamoDB stream's; anything else names what it is not.

    >>> stream_arn("arn:aws:dynamodb:us-east-1:123456789012:table/Orders")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: a DynamoDB table's ARN, not its stream's: use the table's LatestStreamArn ...
    """
    if _STREAM_ARN.fullmatch(value) or _DYNAMODB_STREAM_ARN.fullmatch(value):
        return value
    if _DYNAMODB_TABLE_ARN.fullmatch(value):
        raise ValueError("a DynamoDB table's ARN, not its stream's: use the table's LatestStreamArn "
                         f"(...:table/{value.rpartition('/')[2]}/stream/<label>)")
    raise ValueError("expected arn:aws:kinesis:<region>:<12-digit account>:stream/<name> or "
                     "arn:aws:dynamodb:<region>:<12-digit account>:table/<table>/stream/<label>")


def is_dynamodb_stream_arn(text: str) -> bool:
    return _DYNAMODB_STREAM_ARN.fullmatch(text) is not None


def stream_of(arn: str) -> tuple[StreamKind, str]:
    """What a valid ``streamArn`` names: its kind, and the stream's name (a DynamoDB stream: its table's).

    >>> stream_of("arn:aws:dynamodb:us-east-1:123456789012:table/Orders/stream/2026-01-02T03:04:05.678")
    (<StreamKind.DYNAMODB: 'dynamodb'>, 'Orders')
    """
    kinesis = _STREAM_ARN.fullmatch(arn)
    if kinesis:
        return StreamKind.KINESIS, kinesis.group(1)
    dynamodb = _DYNAMODB_STREAM_ARN.fullmatch(arn)
    assert dynamodb, arn
    return StreamKind.DYNAMODB, dynamodb.group(1)


def stream_arn_list(value: str) -> tuple[str, ...]:
    """``streamArns``: streams' ARNs, comma-separated, all Kinesis streams or all DynamoDB streams
    (one kind of client reads them all, as in the Java KCL and the adapter).

    >>> stream_arn_list("arn:aws:kinesis:us-east-1:123456789012:stream/a, arn:aws:kinesis:us-east-1:1:stream/b")
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: 'arn:aws:kinesis:us-east-1:1:stream/b': expected arn:aws:kinesis:<region>:<12-digit account>:...
    >>> stream_arn_list("arn:aws:kinesis:us-east-1:123456789012:stream/a, "
    ...                 "arn:aws:dynamodb:us-east-1:123456789012:table/Old/stream/2026-01-02T03:04:05.678")
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: 'arn:aws:dynamodb:...' is a DynamoDB stream's and 'arn:aws:kinesis:...' a Kinesis stream's: ...
    """
    arns = name_list(value)
    for arn in arns:
        try:
            stream_arn(arn)
        except ValueError as exc:
            raise ValueError(f"{arn!r}: {exc}") from None
    same_kind(arns)
    return arns


def same_kind(arns: Sequence[str]) -> None:
    """Refuse ARNs of both kinds: an application reads Kinesis streams or DynamoDB streams."""
    kinds = {stream_of(arn)[0]: arn for arn in arns}
    if len(kinds) > 1:
        raise ValueError(f"{kinds[StreamKind.DYNAMODB]!r} is a DynamoDB stream's and {kinds[StreamKind.KINESIS]!r} "
                         "a Kinesis stream's: an application reads streams of one kind")


def adapter_stream_name(arn: str) -> str:
    """The name the DynamoDB Streams Kinesis Adapter gives a DynamoDB stream inside the KCL
    (``KinesisMapperUtil.createKinesisStreamIdentifierFromDynamoDBStreamsArn``): region, account,
    table and label joined by ``$``, the label's colons made ``_``; a multi-stream lease key
    carries it with epoch 1.

    >>> adapter_stream_name("arn:aws:dynamodb:us-east-1:123456789012:table/Orders/stream/2026-01-02T03:04:05.678")
    'us-east-1$123456789012$Orders$2026-01-02T03_04_05.678'
    """
    match = _DYNAMODB_STREAM_ARN.fullmatch(arn)
    assert match, arn
    _, _, _, region, account, _ = arn.split(":", 5)
    return "$".join((region, account, match.group(1), match.group(2).replace(":", "_")))


def arn_region(arn: str) -> str:
    """The region of a valid ARN: ``arn:aws:kinesis:REGION:...``."""
    return arn.split(":")[3]


def stream_name_list(value: str) -> tuple[str, ...]:
    """``streamNames``: Kinesis stream names, comma-separated."""
    names = name_list(value)
    for name in names:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", name):
            raise ValueError(f"{name!r} is not a stream name (1-128 of A-Z a-z 0-9 _ . -)")
    return names


def former_stream_list(value: str) -> tuple[str, ...]:
    """``formerStreamsToDelete``: streams by name or ARN, comma-separated, each as its lease keys
    name it (a DynamoDB stream, by its ARN only, as the adapter names it).

    >>> former_stream_list("orders, arn:aws:dynamodb:us-east-1:123456789012:table/Old/stream/2026-01-02T03:04:05.678")
    ('orders', 'us-east-1$123456789012$Old$2026-01-02T03_04_05.678')
    """
    names = []
    for entry in name_list(value):
        if entry.startswith("arn:"):
            try:
                kind, name = stream_of(stream_arn(entry))
            except ValueError as exc:
                raise ValueError(f"{entry!r}: {exc}") from None
            names.append(adapter_stream_name(entry) if kind is StreamKind.DYNAMODB else name)
        else:
            names.extend(stream_name_list(entry))
    return tuple(names)


def name_list(value: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in value.split(",") if part.strip())
    if not names:
        raise ValueError("expected a comma-separated list of names")
    return names


def dimension_list(value: str) -> tuple[str, ...]:
    names = name_list(value)
    known = ("ALL", "Operation", "ShardId", "WorkerIdentifier", "StreamId")
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"unknown dimension {', '.join(unknown)}; expected some of {', '.join(known)}")
    return names


def tags(value: str) -> tuple[tuple[str, str], ...]:
    pairs = [part.strip().partition("=") for part in value.split(",") if part.strip()]
    if not pairs or any(not k or not sep for k, sep, _ in pairs):
        raise ValueError("expected key=value pairs separated by commas")
    return tuple((k, v) for k, _, v in pairs)


def duration(value: str) -> float:
    """An ISO-8601 duration (java.time.Duration's days-to-seconds form) in seconds.

    >>> duration("P1D"), duration("pt1h30m"), duration("PT0.5S")
    (86400.0, 5400.0, 0.5)
    """
    match = re.fullmatch(r"P(?=\d|T\d)(?:(\d+)D)?(?:T(?=\d)(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?",
                         value.upper())
    if not match:
        raise ValueError("expected a non-negative ISO-8601 duration like PT12H or P1D")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


# --- credential provider chains (CONFIG.md section 5) -----------------------------------

CREDENTIAL_KEYS = ("AwsCredentialsProvider", "AwsCredentialsProviderDynamoDB", "AwsCredentialsProviderCloudWatch")
_PREFIX = "awscredentialsprovider"
_PACKAGES = (
    "software.amazon.kinesis.multilang.auth.",
    "software.amazon.awssdk.auth.credentials.",
    "com.amazonaws.services.kinesis.multilang.auth.",
    "com.amazonaws.auth.",
)
# Simple SDK v2 name -> (min, max) positional arguments.
PROVIDERS: dict[str, tuple[int, int]] = {
    "DefaultCredentialsProvider": (0, 0),
    "EnvironmentVariableCredentialsProvider": (0, 0),
    "SystemPropertyCredentialsProvider": (0, 0),
    "ProfileCredentialsProvider": (0, 1),
    "InstanceProfileCredentialsProvider": (0, 0),
    "ContainerCredentialsProvider": (0, 0),
    "WebIdentityTokenFileCredentialsProvider": (0, 0),
    "AnonymousCredentialsProvider": (0, 0),
    "StsAssumeRoleCredentialsProvider": (2, 2),
}
# KCL's own assume-role provider and SDK v1 (KCL 2.x) names, mapped to the names above.
RENAMED = {
    "KclStsAssumeRoleCredentialsProvider": "StsAssumeRoleCredentialsProvider",
    "DefaultAWSCredentialsProviderChain": "DefaultCredentialsProvider",
    "SystemPropertiesCredentialsProvider": "SystemPropertyCredentialsProvider",
    "EC2ContainerCredentialsProviderWrapper": "ContainerCredentialsProvider",
    "WebIdentityTokenCredentialsProvider": "WebIdentityTokenFileCredentialsProvider",
    "STSAssumeRoleSessionCredentialsProvider": "StsAssumeRoleCredentialsProvider",
    "KclSTSAssumeRoleSessionCredentialsProvider": "StsAssumeRoleCredentialsProvider",
}
V1_NAMES = frozenset(RENAMED) - {"KclStsAssumeRoleCredentialsProvider"}
ASSUME_ROLE_NESTED = ("endpointRegion", "endpoint", "externalId")


def canonical_credential_key(key: str) -> str | None:
    """``AWSCredentialsProviderDynamoDB`` -> ``AwsCredentialsProviderDynamoDB``; None if not one."""
    if key[: len(_PREFIX)].lower() != _PREFIX:
        return None
    canonical = "AwsCredentialsProvider" + key[len(_PREFIX) :]
    return canonical if canonical in CREDENTIAL_KEYS else None


def credential_chain(value: str) -> tuple[tuple[CredentialProvider, ...], tuple[str, ...]]:
    """Parse ``Name|arg|k=v, Name2`` into providers, plus notes (v1 names, ignored nested keys).

    Java skips names it cannot load; kcl-mp refuses them, since a misspelt provider would
    otherwise fall through to a different identity. Messages never repeat the arguments.
    """
    providers: list[CredentialProvider] = []
    notes: list[str] = []
    for element in (part.strip() for part in value.split(",")):
        if not element:
            continue
        name, *rest = (part.strip() for part in element.split("|"))
        simple = name
        for package in _PACKAGES:
            if name.startswith(package):
                simple = name[len(package) :]
        if "." in simple:
            raise ValueError(f"expected SDK credential provider names; {name} is a custom Java class, "
                             "which kcl-mp cannot load")
        if simple in V1_NAMES:
            notes.append(f"{simple} is an SDK v1 name; using {RENAMED[simple]} (the Java 3.x daemon rejects it)")
        simple = RENAMED.get(simple, simple)
        if simple not in PROVIDERS:
            close = difflib.get_close_matches(simple, [*PROVIDERS, *RENAMED], n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else f" (supported: {', '.join(PROVIDERS)})"
            raise ValueError(f"expected credential provider names; unknown provider '{simple}'{hint}")
        args = tuple(a for a in rest if "=" not in a)
        nested = tuple((k.strip(), v.strip()) for k, _, v in (a.partition("=") for a in rest if "=" in a))
        lo, hi = PROVIDERS[simple]
        if not lo <= len(args) <= hi:
            usage = "|<roleArn>|<sessionName>" if lo == 2 else "|<profile>" if hi else " without arguments"
            raise ValueError(f"expected {simple}{usage}")
        if simple == "StsAssumeRoleCredentialsProvider":
            if not args[0].startswith("arn:"):
                raise ValueError(f"expected {simple}|<roleArn>|<sessionName> with a role ARN (arn:aws:iam::...)")
            for k, _ in nested:
                if k not in ASSUME_ROLE_NESTED:
                    notes.append(f"{simple}: nested argument '{k}' is not used (only {', '.join(ASSUME_ROLE_NESTED)})")
            nested = tuple((k, v) for k, v in nested if k in ASSUME_ROLE_NESTED)
        elif nested:
            notes.append(f"{simple}: nested arguments are not used")
            nested = ()
        providers.append(CredentialProvider(simple, args, nested))
    if not providers:
        raise ValueError("expected at least one credential provider, e.g. DefaultCredentialsProvider")
    return tuple(providers), tuple(notes)
