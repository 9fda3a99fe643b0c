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

from dataclasses import dataclass

ECS_V3 = "ECS_CONTAINER_METADATA_URI"
ECS_V4 = "ECS_CONTAINER_METADATA_URI_V4"
EKS_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
CGROUP_V2 = "/sys/fs/cgroup/cgroup.controllers"
CGROUP_V1 = ("/sys/fs/cgroup/memory", "/sys/fs/cgroup/cpu")
PROC = "/proc"
CPU_MAX = "/sys/fs/cgroup/cpu.max"  # cgroup v2: "<quota> <period>" or "max <period>"
CFS_QUOTA = "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"  # cgroup v1: -1 when unlimited
CFS_PERIOD = "/sys/fs/cgroup/cpu/cpu.cfs_period_us"
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


def capacity_cores(usable_cpus: int, cpu_max: str | None = None, cfs_quota: str | None = None,
                   cfs_period: str | None = None) -> float:
    """The cores this host's processes may use: the CPUs it may run on, capped by the cgroup's
    CPU quota (v2 ``cpu.max``, else v1 ``cpu.cfs_quota_us / cpu.cfs_period_us``); a file that
    is absent or unreadable caps nothing. The cost-based leader weighs hosts by it.

    >>> capacity_cores(8), capacity_cores(8, "max 100000"), capacity_cores(8, "150000 100000")
    (8.0, 8.0, 1.5)
    >>> capacity_cores(2, None, "400000", "100000"), capacity_cores(8, None, "-1", "100000"), capacity_cores(4, "x")
    (2.0, 8.0, 4.0)
    """
    cores = float(max(1, usable_cpus))
    try:
        if cpu_max is not None:
            quota, period = cpu_max.split()[:2]
            if quota != "max":
                cores = min(cores, int(quota) / int(period))
        elif cfs_quota is not None and cfs_period is not None and int(cfs_quota) > 0:
            cores = min(cores, int(cfs_quota) / int(cfs_period))
    except ValueError:
        pass
    return round(cores, 3)
