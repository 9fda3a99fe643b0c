"""Typed, frozen configuration, built once from a MultiLangDaemon properties file.

``settings`` holds the frozen dataclasses, ``keys`` declares every properties key once
(parser, default, doc line, the field it feeds), ``properties`` reads the file's text and
``load`` turns it into a ``Config``. This package re-exports the public names:
``from kcl_mp.config import Config, load_config``.
"""

from kcl_mp.config.load import load_config
from kcl_mp.config.settings import (
    LEASE_EPSILON_MS,
    ClientSettings,
    Config,
    CredentialProvider,
    InitialPosition,
    Kcl3Settings,
    LeaseSettings,
    MetricsSettings,
    ProcessorSettings,
    RetrievalSettings,
)

__all__ = ["LEASE_EPSILON_MS", "ClientSettings", "Config", "CredentialProvider", "InitialPosition", "Kcl3Settings",
           "LeaseSettings",
           "MetricsSettings", "ProcessorSettings", "RetrievalSettings", "load_config"]
