"""kclmp.workerMetric=AUTO's decision (fleet/host_metric.py): Java's WorkerMetricsSelector,
platform by platform (EcsResource, EksResource, Ec2Resource, OperatingRangeDataProvider)."""

from __future__ import annotations

import os

import pytest

from kcl_mp.fleet.host_metric import HostFacts, choose, needs_ec2_probe
from kcl_mp.fleet.host_probe import capacity

# (comment, facts, expected metric, words of the reason)
CASES = [
    ("off-cloud Linux (the 3.1.3 reference run)", HostFacts(proc=True, ec2=False), "DEFAULT", "not on EC2, ECS or EKS"),
    ("EC2 Linux: LINUX_PROC", HostFacts(proc=True, ec2=True), "CPU", "EC2: the instance identity document answered"),
    ("EC2 not Linux: no provider", HostFacts(linux=False, proc=True, ec2=True), "DEFAULT", "EC2 without /proc"),
    ("EC2 without /proc", HostFacts(ec2=True), "DEFAULT", "EC2 without /proc"),
    ("ECS task metadata v4", HostFacts(ecs_v4=True, proc=True), "CPU", "ECS: ECS_CONTAINER_METADATA_URI_V4"),
    ("ECS v3 only: on ECS, no provider, EC2 never asked", HostFacts(ecs_v3=True, proc=True), "DEFAULT", "ECS without"),
    ("ECS wins over EKS and EC2", HostFacts(ecs_v4=True, eks_token=True, proc=True, ec2=True), "CPU", "ECS:"),
    ("EKS cgroup v2", HostFacts(eks_token=True, cgroup_v2=True, proc=True), "CPU", "cgroup v2"),
    ("EKS cgroup v1", HostFacts(eks_token=True, cgroup_v1=True, proc=True), "CPU", "cgroup v1"),
    ("EKS without cgroups: on EKS, no provider, EC2 never asked", HostFacts(eks_token=True, proc=True), "DEFAULT",
     "EKS without"),
    ("EKS not Linux", HostFacts(linux=False, eks_token=True, cgroup_v2=True), "DEFAULT", "EKS without"),
    ("IMDS disabled or not asked", HostFacts(proc=True), "DEFAULT", "not on EC2, ECS or EKS"),
]


@pytest.mark.parametrize("facts, metric, why", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_choose(facts: HostFacts, metric: str, why: str) -> None:
    chosen, reason = choose(facts)
    assert chosen == metric and why in reason


def test_ec2_is_asked_only_off_ecs_and_eks() -> None:
    """Java stops at the first platform it is on, EC2 last: no IMDS request on ECS or EKS."""
    assert needs_ec2_probe(HostFacts(proc=True))
    assert not needs_ec2_probe(HostFacts(ecs_v3=True))
    assert not needs_ec2_probe(HostFacts(ecs_v4=True))
    assert not needs_ec2_probe(HostFacts(eks_token=True))


def _write(root, path: str, text: str) -> None:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(text + "\n")


def test_capacity_reads_the_cgroup_quota(tmp_path) -> None:
    """The cores the cost-based leader weighs this host by: the CPUs the process may run on,
    capped by the smallest quota of its own cgroup and its ancestors (a systemd unit's
    CPUQuota= sits on the unit's cgroup, a container's on the mount's root)."""
    usable = len(os.sched_getaffinity(0))
    assert capacity(tmp_path) == float(usable)  # no /proc/self/cgroup, no quota files
    _write(tmp_path, "sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1")  # v1 root: unlimited
    _write(tmp_path, "sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000")
    assert capacity(tmp_path) == float(usable)
    _write(tmp_path, "proc/self/cgroup", "4:cpu,cpuacct:/kclmp-a\n0::/")
    _write(tmp_path, "sys/fs/cgroup/cpu/kclmp-a/cpu.cfs_quota_us", "50000")  # v1: the own cgroup's quota
    _write(tmp_path, "sys/fs/cgroup/cpu/kclmp-a/cpu.cfs_period_us", "100000")
    assert capacity(tmp_path) == 0.5
    _write(tmp_path, "proc/self/cgroup", "0::/system.slice/kcl-mp.service")  # v2, a systemd unit
    assert capacity(tmp_path) == float(usable)  # v1's kclmp-a is not this process's cgroup
    _write(tmp_path, "sys/fs/cgroup/cpu.max", "max 100000")
    _write(tmp_path, "sys/fs/cgroup/system.slice/cpu.max", "150000 100000")  # an ancestor's quota caps too
    assert capacity(tmp_path) == min(1.5, usable)
    _write(tmp_path, "sys/fs/cgroup/system.slice/kcl-mp.service/cpu.max", "25000 100000")  # CPUQuota=25%
    assert capacity(tmp_path) == 0.25
    _write(tmp_path, "proc/self/cgroup", "0::/docker/abc")  # a container without a cgroup namespace:
    assert capacity(tmp_path) == float(usable)  # its path is not under the mount; the root's cpu.max is read
