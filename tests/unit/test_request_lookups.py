"""The embedded emulator's once-made lookups (``embedded.request_lookups``) answer as moto's own."""

from __future__ import annotations

import os

import moto
from moto import backends
from moto.core import responses
from moto.kinesis.responses import KinesisResponse

from kcl_mp.embedded import request_lookups


def test_the_module_list_and_method_names_are_moto_s_own_made_once():
    request_lookups.install()
    request_lookups.install()  # once per process: a second install changes nothing
    root = os.path.dirname(moto.__file__)
    listed = sorted(name for name in os.listdir(root) if os.path.isdir(os.path.join(root, name))
                    and not name.startswith("__"))
    assert list(backends.list_of_moto_modules()) == listed and "kinesis" in listed
    assert backends.list_of_moto_modules() is backends.list_of_moto_modules()
    names = responses.method_names_from_class(KinesisResponse)
    assert "get_records" in names and responses.method_names_from_class(KinesisResponse) is names
