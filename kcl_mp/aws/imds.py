"""Whether the EC2 instance metadata service answers, through botocore's own IMDS client.

Java's ``Ec2Resource.isEc2`` asks for a token (PUT ``latest/api/token``) and then GETs
``latest/dynamic/instance-identity/document`` (with or without the token): a 200 means EC2.
botocore's ``IMDSFetcher`` does the same requests and honours what boto3 users expect:
``AWS_EC2_METADATA_DISABLED=true`` asks nothing (Java has no such switch),
``AWS_EC2_METADATA_SERVICE_ENDPOINT`` / ``ec2_metadata_service_endpoint`` move it.
"""

from __future__ import annotations

import botocore.session
from botocore.exceptions import BotoCoreError
from botocore.utils import BadIMDSRequestError, IMDSFetcher

IDENTITY_DOCUMENT = "latest/dynamic/instance-identity/document"
_CONFIG = ("ec2_metadata_service_endpoint", "ec2_metadata_service_endpoint_mode", "ec2_metadata_v1_disabled")


class _IdentityDocument(IMDSFetcher):
    def answers(self) -> bool:
        try:
            token = self._fetch_metadata_token()
            self._get_request(IDENTITY_DOCUMENT, None, token)
        except (self._RETRIES_EXCEEDED_ERROR_CLS, BadIMDSRequestError, BotoCoreError):
            return False
        return True


def identity_document_answers(timeout_s: float = 1.0) -> bool:
    """One attempt of each request, ``timeout_s`` to connect and to read; False when disabled."""
    session = botocore.session.get_session()
    config = {name: session.get_config_variable(name) for name in _CONFIG}
    fetcher = _IdentityDocument(timeout=timeout_s, num_attempts=1, config=config)
    return fetcher.answers()
