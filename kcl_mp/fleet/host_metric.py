"""Which worker metric a Java KCL 3.x worker on this host would publish (``kclmp.workerMetric=AUTO``).

A Java leader compares each metric only among the workers that report it, so a kcl-mp host
must publish what the fleet's Java workers publish (docs/kcl3-facts.md section 4). Java's
``WorkerMetricsSelector.create`` tries the platforms in the order ECS, EKS, EC2 and stops at
the first one it is on; that platform's operating-range provider then decides CPU or none:

- ECS (``EcsResource``): ``ECS_CONTAINER_METADATA_URI`` or ``..._V4`` set and not empty;
  CPU only on Linux with ``ECS_CONTAINER_METADATA_URI_V4`` set (``LINUX_ECS_METADATA_KEY_V4``);
- EKS (``EksResource``): ``/var/run/secrets/kubernetes.io/serviceaccount/token`` exists; CPU
  on Linux with ``/sys/fs/cgroup/cgroup.controllers`` (cgroup v2) or, without it,
  ``/sys/fs/cgroup/memory`` or ``/sys/fs/cgroup/cpu`` (cgroup v1);
- EC2 (``Ec2Resource``, last): the IMDS instance identity document answers 200 (token PUT
  first); CPU on Linux with ``/proc`` (``LINUX_PROC``);
- anywhere else: no metric (the default worker, empty ``sts``/``opr``).

kcl-mp's CPU figure is always ``/proc/stat``'s (Java's on ECS / EKS is the task's or the
cgroup's): the same metric name and operating range, so the leader groups it with theirs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

ECS_V3 = "ECS_CONTAINER_METADATA_URI"
ECS_V4 = "ECS_CONTAINER_METADATA_URI_V4"
EKS_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
CGROUP_V2 = "/sys/fs/cgroup/cgroup.controllers"
CGROUP_V1 = ("/sys/fs/cgroup/memory", "/sys/fs/cgroup/cpu")
PROC = "/proc"
SELF_CGROUP = "/proc/self/cgroup"  # "0::/path" (v2), "N:cpu,cpuacct:/path" (v1)
CGROUP_ROOT = "/sys/fs/cgroup"  # v2's hierarchy; its cpu.max: "<quota> <period>" or "max <period>"
CGROUP_V1_CPU = "/sys/fs/cgroup/cpu"  # v1's cpu controller; cpu.cfs_quota_us: -1 when unlimited
JAVA = "as the Java daemon would report"


@dataclass(frozen=True)
class HostFacts:
    """What Java's selector looks at; ``ec2`` is None when it was not asked (ECS or EKS came first)."""

    linux: bool = True
    ecs_v3: bool = False  # ECS_CONTAINER_METADATA_URI set, not empty
    ecs_v4: bool = False  # ECS_CONTAINER_METADATA_URI_V4 set, not empty
    eks_token: bool = False
    cgroup_v2: bool = False  # cgroup.controllers exists
    cgroup_v1: bool = False  # cgroup/memory or cgroup/cpu exists
    proc: bool = False
    ec2: bool | None = None  # the identity document answered


def needs_ec2_probe(facts: HostFacts) -> bool:
    """EC2 is tried last: only when the host is neither on ECS nor on EKS."""
    return not (facts.ecs_v3 or facts.ecs_v4 or facts.eks_token)


def choose(facts: HostFacts) -> tuple[str, str]:
    """``("CPU" | "DEFAULT", why)``: the metric a Java worker with these facts publishes."""
    if facts.ecs_v3 or facts.ecs_v4:
        if facts.linux and facts.ecs_v4:
            return "CPU", f"ECS: {ECS_V4} is set"
        return "DEFAULT", f"ECS without {ECS_V4} on Linux: no operating range provider, {JAVA}"
    if facts.eks_token:
        if facts.linux and (facts.cgroup_v2 or facts.cgroup_v1):
            return "CPU", f"EKS: {EKS_TOKEN} exists, cgroup {'v2' if facts.cgroup_v2 else 'v1'}"
        return "DEFAULT", f"EKS without cgroup v1 or v2 on Linux: no operating range provider, {JAVA}"
    if facts.ec2:
        if facts.linux and facts.proc:
            return "CPU", "EC2: the instance identity document answered"
        return "DEFAULT", f"EC2 without /proc on Linux: no operating range provider, {JAVA}"
    return "DEFAULT", f"not on EC2, ECS or EKS, {JAVA}"


def quota_dirs(self_cgroup: str | None) -> list[str]:
    """The cgroup directories whose CPU quota caps this process: its own cgroup and each
    ancestor up to the hierarchy's root, in v2 (the ``0::`` line, under /sys/fs/cgroup) and in
    v1 (the line whose controllers include ``cpu``, under /sys/fs/cgroup/cpu). A systemd unit's
    ``CPUQuota=`` is on its own cgroup, not on the root; in a container the own cgroup is
    mounted as the root, and a directory that does not exist caps nothing, so both roots are
    always read.

    >>> quota_dirs("0::/system.slice/kcl-mp.service")  # doctest: +NORMALIZE_WHITESPACE
    ['/sys/fs/cgroup/system.slice/kcl-mp.service', '/sys/fs/cgroup/system.slice', '/sys/fs/cgroup',
     '/sys/fs/cgroup/cpu']
    >>> quota_dirs("4:cpu,cpuacct:/kclmp-a\\n1:name=systemd:/\\n0::/")
    ['/sys/fs/cgroup', '/sys/fs/cgroup/cpu/kclmp-a', '/sys/fs/cgroup/cpu']
    >>> quota_dirs(None)
    ['/sys/fs/cgroup', '/sys/fs/cgroup/cpu']
    """
    paths = {CGROUP_ROOT: "/", CGROUP_V1_CPU: "/"}
    for line in (self_cgroup or "").splitlines():
        number, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if number == "0" and controllers == "":
            paths[CGROUP_ROOT] = path or "/"
        elif "cpu" in controllers.split(","):
            paths[CGROUP_V1_CPU] = path or "/"
    dirs = []
    for root, path in paths.items():
        parts = [part for part in path.split("/") if part and part not in (".", "..")]
        dirs += ["/".join([root, *parts[:n]]) for n in range(len(parts), -1, -1)]
    return dirs


def quota_cores(cpu_max: str | None, cfs_quota: str | None = None, cfs_period: str | None = None) -> float | None:
    """The cores one cgroup's quota allows (v2 ``cpu.max``, else v1 ``cpu.cfs_quota_us /
    cpu.cfs_period_us``), or None when it sets none or its files are absent or unreadable.

    >>> quota_cores("150000 100000"), quota_cores("max 100000"), quota_cores(None, "50000", "100000")
    (1.5, None, 0.5)
    >>> quota_cores(None, "-1", "100000"), quota_cores("x"), quota_cores(None)
    (None, None, None)
    """
    try:
        if cpu_max is not None:
            quota, period = cpu_max.split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        if cfs_quota is not None and cfs_period is not None and int(cfs_quota) > 0:
            return int(cfs_quota) / int(cfs_period)
    except ValueError:
        pass
    return None


def capacity_cores(usable_cpus: int, quotas: Iterable[float | None] = ()) -> float:
    """The cores this host's processes may use: the CPUs they may run on, capped by the
    smallest CPU quota of their cgroups (``quota_cores`` of each of ``quota_dirs``). The
    cost-based leader weighs hosts by it.

    >>> capacity_cores(8), capacity_cores(8, [None, 1.5, 4.0]), capacity_cores(2, [4.0]), capacity_cores(0)
    (8.0, 1.5, 2.0, 1.0)
    """
    return round(min([float(max(1, usable_cpus)), *(q for q in quotas if q is not None)]), 3)
