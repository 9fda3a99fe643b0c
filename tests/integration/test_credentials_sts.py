"""StsAssumeRoleCredentialsProvider against a real (moto) STS endpoint on loopback."""

from __future__ import annotations

from kcl_mp.aws.clients import client
from kcl_mp.config import ClientSettings, CredentialProvider


def test_assume_role_credentials_sign_requests(moto_url: str) -> None:
    provider = CredentialProvider(
        "StsAssumeRoleCredentialsProvider",
        ("arn:aws:iam::123456789012:role/reader", "kcl-mp-test"),
        (("endpoint", f"{moto_url}^us-east-1"), ("externalId", "ext-1")),
    )
    kinesis = client("kinesis", ClientSettings("us-east-1", moto_url, (provider,)))
    kinesis.list_streams()
    creds = kinesis._request_signer._credentials
    assert creds.method == "kcl-assume-role"
    assert creds.get_frozen_credentials().token  # a session from sts:AssumeRole
