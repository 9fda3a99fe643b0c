"""Credential chains as botocore providers: no request is sent (clients are only built)."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest
from botocore import UNSIGNED

from kcl_mp.aws.clients import DEFAULT_LIMITS, ClientLimits, client, session_for
from kcl_mp.config import ClientSettings
from kcl_mp.config import CredentialProvider as P
from kcl_mp.errors import ConfigError

ENDPOINT = "http://127.0.0.1:9"  # never contacted
ROLE = "arn:aws:iam::123456789012:role/reader"


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No real AWS files; env credentials are the throwaway ones from conftest."""
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    return tmp_path


def settings(*chain: P, region: str | None = "us-east-1") -> ClientSettings:
    return ClientSettings(region, ENDPOINT, tuple(chain))


def method(c) -> str | None:
    creds = c._request_signer._credentials
    return creds.method if creds is not None else None


def test_environment_variables() -> None:
    c = client("kinesis", settings(P("EnvironmentVariableCredentialsProvider")))
    assert method(c) == "env" and c.meta.region_name == "us-east-1" and c.meta.endpoint_url == ENDPOINT
    config = c.meta.config
    assert (config.connect_timeout, config.read_timeout) == (DEFAULT_LIMITS.connect_timeout_s,
                                                             DEFAULT_LIMITS.read_timeout_s)
    assert config.retries == {"mode": "standard", "total_max_attempts": DEFAULT_LIMITS.total_attempts}


def test_limits_of_a_client_of_its_own() -> None:
    """Renewals get a client with their own timeouts, attempts and connections."""
    limits = ClientLimits(connect_timeout_s=0.5, read_timeout_s=0.5, total_attempts=1, max_pool_connections=64)
    config = client("dynamodb", settings(P("EnvironmentVariableCredentialsProvider")), limits=limits).meta.config
    assert (config.connect_timeout, config.read_timeout, config.max_pool_connections) == (0.5, 0.5, 64)
    assert config.retries == {"mode": "standard", "total_max_attempts": 1}


def test_default_chain_is_boto3_s() -> None:
    session = session_for(settings(P("DefaultCredentialsProvider")))
    assert isinstance(session, boto3.Session)
    assert session.get_credentials().method == "env"


def test_named_profile(isolated: Path) -> None:
    (isolated / "credentials").write_text("[dev]\naws_access_key_id = AKIDEV\naws_secret_access_key = s\n")
    c = client("dynamodb", settings(P("ProfileCredentialsProvider", ("dev",))))
    assert method(c) == "shared-credentials-file"
    assert c._request_signer._credentials.access_key == "AKIDEV"


def test_unknown_profile_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="profile 'nope' not found"):
        client("kinesis", settings(P("ProfileCredentialsProvider", ("nope",))))


def test_chain_order_skips_providers_without_credentials(isolated: Path, monkeypatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    (isolated / "credentials").write_text("[default]\naws_access_key_id = AKIDEF\naws_secret_access_key = s\n")
    chain = (P("EnvironmentVariableCredentialsProvider"), P("ProfileCredentialsProvider"))
    assert method(client("kinesis", settings(*chain))) == "shared-credentials-file"


def test_anonymous_is_unsigned() -> None:
    assert client("kinesis", settings(P("AnonymousCredentialsProvider"))).meta.config.signature_version is UNSIGNED


def test_anonymous_after_a_provider_that_has_credentials(monkeypatch) -> None:
    chain = (P("EnvironmentVariableCredentialsProvider"), P("AnonymousCredentialsProvider"))
    assert method(client("kinesis", settings(*chain))) == "env"
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    assert client("kinesis", settings(*chain)).meta.config.signature_version is UNSIGNED


def test_assume_role_is_deferred() -> None:
    provider = P("StsAssumeRoleCredentialsProvider", (ROLE, "kcl"), (("externalId", "x"),))
    assert method(client("kinesis", settings(provider))) == "kcl-assume-role"  # STS not called yet


@pytest.mark.parametrize("chain", [(P("SystemPropertyCredentialsProvider"),), ()])
def test_no_usable_provider(chain: tuple[P, ...]) -> None:
    with pytest.raises(ConfigError, match="no usable credential provider"):
        client("kinesis", settings(*chain))


def test_unsupported_provider() -> None:
    with pytest.raises(ConfigError, match="com.example.Custom is not supported"):
        client("kinesis", settings(P("com.example.Custom")))


def test_no_region_anywhere_is_a_config_error(monkeypatch) -> None:
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    with pytest.raises(ConfigError, match="no AWS region for kinesis: set regionName"):
        client("kinesis", settings(P("EnvironmentVariableCredentialsProvider"), region=None))


def test_aws_region_env_is_used(monkeypatch) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    c = client("kinesis", settings(P("EnvironmentVariableCredentialsProvider"), region=None))
    assert c.meta.region_name == "eu-central-1"
