"""The Java peers' command lines (kcl_mp.devtools.java_daemon): what `make java-peers` built,
and a clear error naming the target when it did not."""

from __future__ import annotations

import pytest

from kcl_mp.devtools import java_daemon
from kcl_mp.errors import ConfigError


def test_a_built_peer_runs_its_jar_beside_its_dependencies(tmp_path, monkeypatch):
    home = tmp_path / "adapter-consumer"
    home.mkdir()
    (home / ".pinned").touch()
    monkeypatch.setattr(java_daemon, "PEERS", tmp_path)
    argv = java_daemon.peer_command("adapter-consumer", "kclmp.peers.AdapterConsumer", "worker=java-1")
    assert argv == ["java", "-cp", f"{home}/*:{home}/lib/*", "kclmp.peers.AdapterConsumer", "worker=java-1"]


def test_a_peer_not_built_names_the_make_target(tmp_path, monkeypatch):
    monkeypatch.setattr(java_daemon, "PEERS", tmp_path)
    with pytest.raises(ConfigError, match="the Java peer adapter-consumer is not built in .*: make java-peers"):
        java_daemon.peer_command("adapter-consumer", "kclmp.peers.AdapterConsumer")


def test_the_kcl_3_5_daemon_runs_from_its_peer(tmp_path, monkeypatch):
    home = tmp_path / "multilang-35"
    home.mkdir()
    (home / ".pinned").touch()
    monkeypatch.setattr(java_daemon, "PEERS", tmp_path)
    assert java_daemon.command("w.properties", version="3.5.1") == [
        "java", "-Daws.cborEnabled=false", "-cp", f"{home}/*:{home}/lib/*", "kclmp.peers.VersionedDaemon",
        "--properties-file", "w.properties"]


def test_an_unknown_kcl_version_names_the_known_ones():
    with pytest.raises(ConfigError, match="no Java daemon for KCL 3.4.0: one of 3.1.3, 3.5.1"):
        java_daemon.command("w.properties", version="3.4.0")
