"""The package's layering, checked from its source: what may import what.

- Pure modules (decisions, configuration, the protocol) import neither boto3 nor botocore, so
  they can be read, replayed and tested anywhere; the protocol imports no I/O module at all.
- The runtime never imports the tooling in ``kcl_mp.devtools``.
- No import cycles between kcl_mp's modules, counting imports inside functions too.
- The pool processes' code (``worker``, ``retrieval``, ``multilang``) never reaches ``fleet``:
  the KCL 3.x fleet is the supervisor's alone.
- The daemon never imports ``spark``: the Spark half runs in processor children and on Spark.
- No module is much over 400 lines (STYLE.md: one responsibility a module).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "kcl_mp"

PURE = ["kcl_mp.backoff", "kcl_mp.errors", "kcl_mp.sequence",
        "kcl_mp.config", "kcl_mp.config.keys", "kcl_mp.config.load", "kcl_mp.config.properties",
        "kcl_mp.config.settings", "kcl_mp.config.values",
        "kcl_mp.leases.lease", "kcl_mp.leases.balance", "kcl_mp.leases.shard_sync", "kcl_mp.leases.fencing",
        "kcl_mp.leases.rows", "kcl_mp.leases.throughput", "kcl_mp.fleet.client_version", "kcl_mp.fleet.host_metric",
        "kcl_mp.fleet.assignment", "kcl_mp.fleet.assignment_round", "kcl_mp.fleet.cost_balance",
        "kcl_mp.leases.cost", "kcl_mp.fleet.table_migration",
        "kcl_mp.retrieval.dynamodb_record", "kcl_mp.leases.handoff",
        "kcl_mp.multilang.wire", "kcl_mp.multilang.child_lines", "kcl_mp.multilang.protocol", "kcl_mp.multilang.command",
        "kcl_mp.multilang.stdout_notes",
        "kcl_mp.retrieval.deaggregate", "kcl_mp.supervisor.restart_policy", "kcl_mp.supervisor.progress",
        "kcl_mp.supervisor.shard_life", "kcl_mp.supervisor.schedule", "kcl_mp.leases.stream_changes",
        "kcl_mp.metrics.catalogue", "kcl_mp.metrics.health", "kcl_mp.metrics.link", "kcl_mp.supervisor.starts", "kcl_mp.worker.channel",
        "kcl_mp.devtools.java_rule", "kcl_mp.devtools.bench_figures",
        "kcl_mp.spark.layout", "kcl_mp.spark.queries", "kcl_mp.spark.kinesis_plan", "kcl_mp.embedded.stream_tree"]
NO_IO = ["kcl_mp.multilang.protocol"]
MAX_LINES = 410  # "about 400"


def modules() -> dict[str, Path]:
    """Every module of the runtime and the tooling (the shipped processors are programs, not modules)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if "processors" in parts or "kit" in parts:
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """kcl_mp modules that ``name`` imports anywhere in its source (a submodule counts, not its package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {m for m in out if m in known and m != name}


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports(name, path, set(found)) for name, path in found.items()}


def test_the_pure_list_names_real_modules():
    assert set(PURE) <= set(modules()), sorted(set(PURE) - set(modules()))


def test_pure_modules_import_no_aws_sdk():
    code = (f"import importlib, sys\nfor m in {PURE!r}: importlib.import_module(m)\n"
            "print(sorted({'boto3', 'botocore'} & {m.split('.')[0] for m in sys.modules}))\n"
            f"print(sorted(m for m in {NO_IO!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.splitlines()[0] == "[]", out.stdout


def test_the_protocol_imports_no_io():
    code = (f"import sys\nfor m in {NO_IO!r}: __import__(m)\n"
            "print(sorted({'boto3', 'botocore', 'subprocess', 'socket'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_the_runtime_never_imports_the_tooling():
    leaks = {(name, dep) for name, deps in graph().items() if not name.startswith("kcl_mp.devtools")
             for dep in deps if dep.startswith("kcl_mp.devtools")}
    assert not leaks, sorted(leaks)


def test_no_import_cycles():
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in sorted(edges[node]):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    assert not cycles, cycles


def test_the_pool_processes_never_reach_the_fleet():
    edges = graph()
    seen: set[str] = set()
    todo = [m for m in edges if m.split(".")[1:2] in (["worker"], ["retrieval"], ["multilang"])]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(edges[module])
    assert not {m for m in seen if m.startswith("kcl_mp.fleet")}, sorted(m for m in seen if m.startswith("kcl_mp.fleet"))


def test_the_daemon_never_imports_the_spark_half():
    leaks = {(name, dep) for name, deps in graph().items()
             if name.split(".")[1:2] not in (["spark"], ["devtools"]) for dep in deps if dep.startswith("kcl_mp.spark")}
    assert not leaks, sorted(leaks)


def test_no_module_is_much_over_400_lines():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, long
