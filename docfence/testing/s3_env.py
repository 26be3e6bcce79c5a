"""Dummy AWS credentials for tests that talk to a loopback S3 server (moto): boto3 finds them in the
environment, and the host's own AWS configuration (profiles, credential files, instance metadata) is
hidden, so no test can reach a real account or wait on a metadata endpoint."""

from __future__ import annotations

import os

import pytest

#: What boto3 reads instead of the host's configuration.
DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}
#: Set on the host, these would pick another identity or profile: removed.
HOST_AWS_VARS = ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE")


def use_dummy_aws(mp: pytest.MonkeyPatch) -> None:
    """Set the dummy credentials and hide the host's AWS configuration, until `mp` is undone."""
    for name, value in DUMMY_AWS_ENV.items():
        mp.setenv(name, value)
    for name in HOST_AWS_VARS:
        mp.delenv(name, raising=False)
