"""The facts Java's ``WorkerMetricsSelector`` looks at, read from this host once at start.

The decision is ``host_metric.choose``; this module only reads the environment, the files
and (when ECS and EKS did not answer first, as in Java) the EC2 instance metadata service.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

from kcl_mp.aws.imds import identity_document_answers
from kcl_mp.fleet import host_metric
from kcl_mp.fleet.host_metric import HostFacts


def read_facts(root: Path = Path("/")) -> HostFacts:
    """This host's facts; ``root`` is where the absolute paths are looked up (``/``)."""
    def exists(path: str) -> bool:
        return (root / path.lstrip("/")).exists()

    facts = HostFacts(linux=sys.platform.startswith("linux"),
                      ecs_v3=bool(os.environ.get(host_metric.ECS_V3)),
                      ecs_v4=bool(os.environ.get(host_metric.ECS_V4)),
                      eks_token=exists(host_metric.EKS_TOKEN),
                      cgroup_v2=exists(host_metric.CGROUP_V2),
                      cgroup_v1=any(exists(p) for p in host_metric.CGROUP_V1),
                      proc=exists(host_metric.PROC))
    if host_metric.needs_ec2_probe(facts):
        return replace(facts, ec2=identity_document_answers())
    return facts


def capacity(root: Path = Path("/")) -> float:
    """This host's cores for kcl-mp's processes, capped by the CPU quota of the cgroups it runs
    in (``host_metric.capacity_cores``)."""
    def read(path: str) -> str | None:
        try:
            return (root / path.lstrip("/")).read_text(encoding="ascii").strip()
        except OSError:
            return None

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quotas = [host_metric.quota_cores(read(f"{d}/cpu.max"), read(f"{d}/cpu.cfs_quota_us"),
                                      read(f"{d}/cpu.cfs_period_us"))
              for d in host_metric.quota_dirs(read(host_metric.SELF_CGROUP))]
    return host_metric.capacity_cores(usable, quotas)


def worker_metric(configured: str, root: Path = Path("/")) -> tuple[str, str]:
    """``kclmp.workerMetric`` resolved: ``(metric, why)``; only AUTO looks at the host."""
    if configured != "AUTO":
        return configured, "set"
    return host_metric.choose(read_facts(root))
