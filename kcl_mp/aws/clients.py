"""boto3 sessions and clients for the Java daemon's credential provider chains.

``AwsCredentialsProvider`` names SDK v2 providers tried in order (CONFIG.md section 5);
here each becomes the matching botocore provider, and the chain a botocore
``CredentialResolver``, so credentials are resolved lazily and refreshed by botocore:

    DefaultCredentialsProvider               boto3's default chain
    EnvironmentVariableCredentialsProvider   AWS_ACCESS_KEY_ID / _SECRET_ACCESS_KEY / _SESSION_TOKEN
    ProfileCredentialsProvider[|name]        the default or named profile (keys, role, sso, process)
    InstanceProfileCredentialsProvider       EC2 instance metadata
    ContainerCredentialsProvider             ECS/EKS container endpoint
    WebIdentityTokenFileCredentialsProvider  AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN
    StsAssumeRoleCredentialsProvider|arn|session[|externalId=..|endpointRegion=..|endpoint=url^region]
                                             sts:AssumeRole with default-chain credentials, refreshed
    AnonymousCredentialsProvider             unsigned requests (ends the chain, as in Java)
    SystemPropertyCredentialsProvider        Java system properties: none exist here, so it
                                             provides nothing and the chain moves on

Region: the ``ClientSettings`` region, else AWS_REGION, else boto3's own chain
(AWS_DEFAULT_REGION, profile); no region at all is a ConfigError, as it is a start-up
failure in Java (the "defaults to us-east-1" of old samples is not true).

Nothing is cached at module level: pool processes are forked and build their clients
after the fork.

Every credential a client signs with is handed to the log scrubber (``logs.add_secrets``):
those botocore resolved to make the client at once, those resolved later (STS's deferred
ones) or refreshed before the request they sign, so whatever provider gave them, no line
this process logs afterwards shows them (a processor printing them to stderr included).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.session
from botocore import UNSIGNED
from botocore.config import Config as BotoConfig
from botocore.credentials import (
    CredentialProvider as BotoProvider,
)
from botocore.credentials import (
    CredentialResolver,
    DeferredRefreshableCredentials,
    create_credential_resolver,
)
from botocore.exceptions import BotoCoreError, ProfileNotFound
from botocore.loaders import create_loader

from kcl_mp import logs
from kcl_mp.aws.raw_records import RawRecordsParserFactory
from kcl_mp.config import ClientSettings, CredentialProvider
from kcl_mp.errors import ConfigError


@dataclass(frozen=True)
class ClientLimits:
    """How long one request may wait, how often botocore tries it (the first try included;
    standard retry mode backs off with jitter and retries throttling), and how many
    connections the client keeps. Lease renewals use their own (``renewer.client_limits``)."""

    connect_timeout_s: float = 5
    read_timeout_s: float = 20
    total_attempts: int = 4
    max_pool_connections: int = 20


DEFAULT_LIMITS = ClientLimits()

# botocore provider METHODs each simple provider name selects from a default resolver.
_PROFILE_METHODS = ("assume-role-with-web-identity", "sso", "shared-credentials-file", "login",
                    "custom-process", "config-file", "assume-role")
_METHODS: dict[str, tuple[str, ...]] = {
    "EnvironmentVariableCredentialsProvider": ("env",),
    "InstanceProfileCredentialsProvider": ("iam-role",),
    "ContainerCredentialsProvider": ("container-role",),
    "WebIdentityTokenFileCredentialsProvider": ("assume-role-with-web-identity",),
}


class _AssumeRole(BotoProvider):
    """sts:AssumeRole with the default chain's credentials, refreshed before expiry (Java's
    KclStsAssumeRoleCredentialsProvider). STS is first called when a request needs credentials."""

    METHOD = "kcl-assume-role"

    def __init__(self, provider: CredentialProvider, region: str | None):
        super().__init__()
        self.role_arn, self.session_name = provider.args
        nested = dict(provider.nested)
        self.external_id = nested.get("externalId")
        self.region = nested.get("endpointRegion") or region
        self.endpoint: str | None = None
        if "endpoint" in nested:
            endpoint, _, signing_region = nested["endpoint"].partition("^")
            self.endpoint = endpoint if "://" in endpoint else "https://" + endpoint
            self.region = signing_region or self.region

    def _fetch(self) -> dict[str, Any]:
        sts = boto3.Session().client("sts", region_name=self.region, endpoint_url=self.endpoint,
                                     config=_boto_config(signed=True))
        kwargs = {"RoleArn": self.role_arn, "RoleSessionName": self.session_name}
        if self.external_id:
            kwargs["ExternalId"] = self.external_id
        creds = sts.assume_role(**kwargs)["Credentials"]
        return {
            "access_key": creds["AccessKeyId"],
            "secret_key": creds["SecretAccessKey"],
            "token": creds["SessionToken"],
            "expiry_time": creds["Expiration"].isoformat(),
        }

    def load(self) -> DeferredRefreshableCredentials:
        return DeferredRefreshableCredentials(refresh_using=self._fetch, method=self.METHOD)


def _pick(resolver: CredentialResolver, methods: tuple[str, ...]) -> list[BotoProvider]:
    return [p for p in resolver.providers if p.METHOD in methods]


def _providers(provider: CredentialProvider, region: str | None) -> list[BotoProvider]:
    """The botocore providers that stand for one element of the chain."""
    name = provider.name
    if name == "DefaultCredentialsProvider":
        return list(create_credential_resolver(botocore.session.Session()).providers)
    if name == "ProfileCredentialsProvider":
        profile = provider.args[0] if provider.args else None
        try:
            return _pick(create_credential_resolver(botocore.session.Session(profile=profile)), _PROFILE_METHODS)
        except ProfileNotFound:
            raise ConfigError(f"ProfileCredentialsProvider: profile '{profile}' not found in the AWS "
                              "config or credentials file") from None
    if name in _METHODS:
        return _pick(create_credential_resolver(botocore.session.Session()), _METHODS[name])
    if name == "StsAssumeRoleCredentialsProvider":
        return [_AssumeRole(provider, region)]
    if name == "SystemPropertyCredentialsProvider":
        return []  # Java system properties do not exist for kcl-mp
    raise ConfigError(f"credential provider {name} is not supported by kcl-mp")


def _chain(settings: ClientSettings) -> tuple[list[BotoProvider], bool]:
    """botocore providers for the chain, and whether it ends in AnonymousCredentialsProvider."""
    providers: list[BotoProvider] = []
    for provider in settings.credentials:
        if provider.name == "AnonymousCredentialsProvider":
            return providers, True  # always provides: later elements are never reached
        providers += _providers(provider, settings.region)
    if not providers:
        names = ", ".join(p.name for p in settings.credentials) or "none"
        raise ConfigError(f"no usable credential provider in the chain ({names}); "
                          "SystemPropertyCredentialsProvider reads Java system properties, which kcl-mp "
                          "does not have: use EnvironmentVariableCredentialsProvider")
    return providers, False


# One loader for every session of the process: the service models (megabytes of parsed
# JSON) are read once, and pool processes forked after the supervisor made its clients share
# the parent's copy instead of each parsing its own.
_LOADER = create_loader()


def session_for(settings: ClientSettings) -> boto3.Session:
    """A boto3 session whose credentials come from the settings' provider chain, in order."""
    providers, _ = _chain(settings)
    core = botocore.session.Session()
    core.register_component("data_loader", _LOADER)
    if [p.name for p in settings.credentials] != ["DefaultCredentialsProvider"]:
        core.register_component("credential_provider", CredentialResolver(providers))
    return boto3.Session(botocore_session=core, region_name=settings.region)


def _boto_config(signed: bool, limits: ClientLimits = DEFAULT_LIMITS) -> BotoConfig:
    return BotoConfig(
        connect_timeout=limits.connect_timeout_s,
        read_timeout=limits.read_timeout_s,
        retries={"mode": "standard", "total_max_attempts": limits.total_attempts},
        max_pool_connections=limits.max_pool_connections,
        user_agent_extra="kcl-mp",
        **({} if signed else {"signature_version": UNSIGNED}),
    )


def _keep(value: Any) -> Any:
    return value


def client(service: str, settings: ClientSettings, *, raw_records: bool = False,
           limits: ClientLimits = DEFAULT_LIMITS) -> Any:
    """A boto3 client for ``service`` ("kinesis", "dynamodb", "cloudwatch") per ``settings``.

    ``raw_records``: GetRecords answers are the wire's JSON as orjson decodes it, unwalked
    (``raw_records``), and elsewhere blobs stay the base64 text of the wire and timestamps
    the wire's number (SubscribeToShard's events): ``Data`` and ``ApproximateArrivalTimestamp``
    as the data path's fast path takes them (see ``deaggregate``). The session is this
    client's own, so no other client is affected.
    ``limits``: timeouts, attempts and connections (the defaults suit every call but renewals).
    """
    providers, anonymous = _chain(settings)
    session = session_for(settings)
    if raw_records:
        factory = RawRecordsParserFactory()
        factory.set_parser_defaults(blob_parser=_keep, timestamp_parser=_keep)
        session._session.register_component("response_parser_factory", factory)
    if anonymous and providers:
        # Java tries the providers before Anonymous first; resolve them now to decide.
        try:
            anonymous = session.get_credentials() is None
        except BotoCoreError:
            anonymous = True
    # AWS_REGION first, as in the Java SDK's region chain (botocore itself reads only
    # AWS_DEFAULT_REGION and the profile).
    region = settings.region or os.environ.get("AWS_REGION") or session.region_name
    if not region:
        raise ConfigError(f"no AWS region for {service}: set regionName in the properties file "
                          "(or AWS_REGION in the environment)")
    made = session.client(service, region_name=region, endpoint_url=settings.endpoint,
                          config=_boto_config(signed=not anonymous, limits=limits))
    if not anonymous:
        note = _scrubbed_from_logs(session)
        made.meta.events.register("before-sign", note)
        if not isinstance(session.get_credentials(), DeferredRefreshableCredentials):
            note()  # resolved to make the client: scrubbed before any request (STS's wait for one)
    return made


def _scrubbed_from_logs(session: boto3.Session) -> Any:
    """A before-sign handler: the credentials about to sign go to the log scrubber. The
    session's credentials object is the client's (botocore resolves it once a session);
    freezing it refreshes it when due, as the signer is about to do anyway."""
    def note(**_: Any) -> None:
        credentials = session.get_credentials()
        if credentials is not None:
            frozen = credentials.get_frozen_credentials()
            logs.add_secrets(frozen.access_key, frozen.secret_key, frozen.token)

    return note
