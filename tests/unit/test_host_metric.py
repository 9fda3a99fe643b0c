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


def test_capacity_reads_the_cgroup_quota(tmp_path) -> None:
    """The cores the cost-based leader weighs this host by: cgroup v2's cpu.max caps the CPUs
    the process may run on; without it v1's quota; with neither, the CPUs."""
    usable = len(os.sched_getaffinity(0))
    assert capacity(tmp_path) == float(usable)
    v1 = tmp_path / "sys/fs/cgroup/cpu"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("50000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert capacity(tmp_path) == 0.5
    (tmp_path / "sys/fs/cgroup/cpu.max").write_text("max 100000\n")
    assert capacity(tmp_path) == float(usable)  # v2 says unlimited: v1's files are not read
    (tmp_path / "sys/fs/cgroup/cpu.max").write_text("25000 100000\n")
    assert capacity(tmp_path) == 0.25
