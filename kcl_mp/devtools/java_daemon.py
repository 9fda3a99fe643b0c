"""The Java MultiLangDaemon beside kcl-mp: for the benchmarks, the mixed-fleet test and a
team comparing the two on one machine.

The jars are the ones PyPI's ``kclpy-ext`` ships (``amazon_kclpy/jars``: KCL 3.1.3);
Java 17+ from the machine. Two facts make it run against a loopback emulator:

- its Kinesis client speaks cleartext HTTP/2 only, so the emulator must be
  ``start_emulator(http2=True)``, and its CBOR must be off (moto speaks JSON);
- KCL 3.x calls the EC2 metadata address at every start, whatever
  AWS_EC2_METADATA_DISABLED says, so it must run in a network namespace with only
  loopback up: ``in_loopback_namespace`` re-runs a command there.

Other Java programs (the DynamoDB Streams adapter's consumer; newer KCL daemons) are Maven
projects under tests/java/, built by ``make java-peers`` into .cache/java/PEER:
``peer_command`` runs one. ``command(properties, version="3.5.1")`` runs the daemon of
tests/java/multilang-35: the 3.1.3 multilang layer (the newest on Maven Central) on the
3.5.1 core, where the lease table, leader, assignment and migration live; its first line
on stderr names the core's version and jar. The 3.1.3 layer does not know 3.5's two
table-migration keys (``migrateAllEntitiesToLeaseTable``, ``tableMigrationCompleteBakeTimeSeconds``);
that daemon sets them from the properties file as 3.5.1's layer does (a second stderr line
says their values).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from kcl_mp.errors import ConfigError

MAIN_CLASS = "software.amazon.kinesis.multilang.MultiLangDaemon"
PEER_MAIN_CLASS = "kclmp.peers.VersionedDaemon"  # a daemon peer's: logs its KCL core, then MAIN_CLASS
NETNS_ENV = "KCLMP_IN_LOOPBACK_NETNS"  # set inside the namespace
PEERS = Path(__file__).resolve().parents[2] / ".cache" / "java"  # make java-peers


# the KCL core's version: the peer its jars come from (None: kclpy-ext's)
KCL_VERSIONS: dict[str, str | None] = {"3.1.3": None, "3.5.1": "multilang-35"}
DEFAULT_VERSION = "3.1.3"
JAVA_OPTIONS = ("-Daws.cborEnabled=false",)  # moto speaks JSON: any Java KCL program run against it


def command(properties: str | Path, version: str = DEFAULT_VERSION) -> list[str]:
    """The Java daemon's command line for a properties file, on the KCL core ``version``
    (one of ``KCL_VERSIONS``)."""
    if version not in KCL_VERSIONS:
        raise ConfigError(f"no Java daemon for KCL {version}: one of {', '.join(KCL_VERSIONS)}")
    peer = KCL_VERSIONS[version]
    if peer is not None:
        return peer_command(peer, PEER_MAIN_CLASS, "--properties-file", str(properties), java_options=JAVA_OPTIONS)
    try:
        import amazon_kclpy
    except ImportError as exc:
        raise ConfigError("the Java daemon's jars come with PyPI's kclpy-ext: pip install kclpy-ext") from exc
    _require_java()
    jars = Path(amazon_kclpy.__file__).parent / "jars"
    return ["java", *JAVA_OPTIONS, "-cp", f"{jars}/*", MAIN_CLASS, "--properties-file", str(properties)]


def peer_command(peer: str, main_class: str, *args: str, java_options: Sequence[str] = ()) -> list[str]:
    """The command line running ``main_class`` of the Java peer built from
    tests/java/``peer``/pom.xml: its jar and its dependencies' on the class path."""
    home = PEERS / peer
    if not (home / ".pinned").exists():
        raise ConfigError(f"the Java peer {peer} is not built in {home}: make java-peers")
    _require_java()
    return ["java", *java_options, "-cp", f"{home}/*:{home}/lib/*", main_class, *args]


def _require_java() -> None:
    if shutil.which("java") is None:
        raise ConfigError("java (17+) is needed to run the Java daemon (Debian: openjdk-17-jre-headless)")


def inside_namespace() -> bool:
    return os.environ.get(NETNS_ENV) == "1"


def in_loopback_namespace(argv: Sequence[str]) -> int:
    """Run ``argv`` in a new network namespace with only loopback up; its exit status.
    Needs unshare (util-linux) and root, or unprivileged user namespaces."""
    if shutil.which("unshare") is None:
        raise ConfigError("unshare (util-linux) is needed: the Java daemon must not reach the network")
    inner = f'ip link set lo up && exec env {NETNS_ENV}=1 "$0" "$@"'
    return subprocess.call(["unshare", "-n", "sh", "-c", inner, *argv])
