"""deploy/ and docs/deploy.md agree with each other and with the code: the systemd unit
parses and restarts on what it should, the Kubernetes manifests load and carry the probes
and the grace the docs state, and each IAM policy lists exactly the AWS API actions that
kcl-mp's code calls for its feature (found in the source, named by botocore's models)."""

from __future__ import annotations

import ast
import configparser
import json
import re
import shutil
import subprocess
from pathlib import Path

import botocore.session
import pytest
import yaml
from botocore import xform_name

from kcl_mp.cli import fail
from kcl_mp.config import ProcessorSettings, load_config
from kcl_mp.errors import ConfigError, DependencyError

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOC = (ROOT / "docs" / "deploy.md").read_text()
DEFAULT_GRACE_S = ProcessorSettings(command=("p",)).shutdown_grace_ms / 1000
STOP_MARGIN_S = 15  # docs/deploy.md: after the grace, leases released, processors ended, last metrics


def doc_row(setting: str) -> str:
    """The value column of ``setting``'s row in a table of docs/deploy.md."""
    match = re.search(rf"^\| `{re.escape(setting)}` \| `?([^`|]+)`? \|", DOC, re.M)
    assert match, f"docs/deploy.md has no row for {setting}"
    return match.group(1).strip()


# -- systemd ----------------------------------------------------------------------------


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string((DEPLOY / "systemd" / "kcl-mp.service").read_text())
    return parser


def test_the_systemd_unit_parses_and_restarts_on_what_it_should(capsys):
    service = unit()
    assert set(service.sections()) == {"Unit", "Service", "Install"}
    s = service["Service"]
    assert s["ExecStart"].split()[0].endswith("/kcl-mp") and "--properties" in s["ExecStart"]
    assert "--metrics-port" in s["ExecStart"] and "workerId=%H" in s["ExecStart"]
    # scraped from another host: it says so (the default, 127.0.0.1, is this host only)
    assert "--metrics-address 0.0.0.0" in s["ExecStart"]
    assert s["Restart"] == "on-failure" == doc_row("Restart")
    prevented = set(s["RestartPreventExitStatus"].split())
    assert prevented == set(doc_row("RestartPreventExitStatus").split())
    # a start-up that failed on AWS (status 1, as a configuration error) is restarted; argparse's 2 is not
    assert str(fail(DependencyError("probe"))) not in prevented and "2" in prevented and "0" not in prevented
    assert str(fail(ConfigError("probe"))) == str(fail(DependencyError("probe")))
    capsys.readouterr()
    assert s["KillMode"] == "mixed" == doc_row("KillMode"), "SIGTERM to kcl-mp alone, not its processors"
    assert int(s["TimeoutStopSec"]) == DEFAULT_GRACE_S + STOP_MARGIN_S == int(doc_row("TimeoutStopSec"))
    assert int(service["Unit"]["StartLimitBurst"]) > 0


def test_systemd_accepts_every_setting_of_the_unit(tmp_path):
    """systemd's own parser: any setting it does not accept is a diagnostic line. The program
    is swapped for one that exists on this machine."""
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is needed: apt-get install systemd"
    text = (DEPLOY / "systemd" / "kcl-mp.service").read_text()
    program = text.split("ExecStart=", 1)[1].split()[0]
    (tmp_path / "kcl-mp.service").write_text(text.replace(program, shutil.which("true") or "/bin/true"))
    result = subprocess.run([analyze, "verify", str(tmp_path / "kcl-mp.service")], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stdout + result.stderr


# -- Kubernetes -------------------------------------------------------------------------


def manifests() -> dict[str, dict]:
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "kcl-mp.yaml").read_text()))
    return {doc["kind"]: doc for doc in docs}


def test_the_kubernetes_manifests_load_with_the_probes_and_grace_the_docs_state(tmp_path):
    objects = manifests()
    assert {"StatefulSet", "PodDisruptionBudget", "ConfigMap", "Service", "ServiceAccount"} <= set(objects)
    workload = objects["StatefulSet"]
    pod = workload["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    args = " ".join(container["args"])
    # one worker id per pod: its name
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert "workerId=$(POD_NAME)" in container["args"]
    # probes: /healthz on the port kcl-mp serves
    port = int(re.search(r"--metrics-port[= ](\d+)", args).group(1))
    assert "--metrics-address=0.0.0.0" in container["args"], "the kubelet probes the pod IP, not loopback"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] == "/healthz" and ports[get["port"]] == port, probe
        assert f"`{probe}`" in DOC
    assert "httpGet /healthz" in DOC and f"({port})" in DOC
    # liveness gives a slow round longer than failoverTimeMillis before a restart
    (_, properties), = objects["ConfigMap"]["data"].items()
    path = tmp_path / "app.properties"
    path.write_text(properties)
    config = load_config(path)
    liveness = container["livenessProbe"]
    assert liveness["periodSeconds"] * liveness["failureThreshold"] > config.lease.failover_time_ms / 1000
    # grace: preStop + shutdownGraceMillis + the margin, as the docs say
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    assert grace == int(pre_stop[1]) + config.processor.shutdown_grace_ms / 1000 + STOP_MARGIN_S
    assert f"`terminationGracePeriodSeconds: {grace}` = preStop {pre_stop[1]} s + shutdownGraceMillis " \
           f"{config.processor.shutdown_grace_ms // 1000} s" in DOC
    # the disruption budget covers these pods, one at a time
    budget = objects["PodDisruptionBudget"]["spec"]
    assert budget["maxUnavailable"] == 1
    assert budget["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert workload["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pod["spec"]["serviceAccountName"] == objects["ServiceAccount"]["metadata"]["name"]
    # the image passes SIGTERM to kcl-mp (exec form, tini as PID 1)
    dockerfile = (DEPLOY / "container" / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["/usr/bin/tini", "--", "kcl-mp"]' in dockerfile


# -- IAM --------------------------------------------------------------------------------

SERVICES = ("kinesis", "dynamodb", "cloudwatch", "sts", "dynamodbstreams")
CLIENTS = {"kinesis", "client", "cloudwatch", "sts", "dynamodb", "dynamodbstreams"}  # names the code gives its boto3 clients
TOOLING = {"embedded", "devtools.producer"}  # the demo's and the tests' stream setup and producer, not a host's
PREFLIGHT = "cli.check_config"  # checks the calls the features make, so it needs no policy of its own
# module -> the policies whose feature runs it
FEATURES = {
    "leases.table": ("polling", "fanout", "dynamodb-streams"),
    "retrieval.kinesis_shards": ("polling", "fanout", "spark-kinesis"),
    "retrieval.kinesis_stream": ("polling",),
    "retrieval.dynamodb_stream": ("dynamodb-streams",),
    "retrieval.fanout": ("fanout", "spark-kinesis"),
    "spark.kinesis_source": ("spark-kinesis",),
    "spark.kinesis_read": ("spark-kinesis",),
    "metrics.process": ("cloudwatch",),
    "aws.clients": ("assume-role",),
    "fleet.state_store": ("kcl3",),
    "fleet.leader": ("kcl3",),
    "fleet.worker_metrics": ("kcl3",),
    "fleet.fleet_metrics": ("kcl3",),
    "leases.owner_index": ("kcl3",),
    "fleet.table_migrator": ("kcl3",),
    "aws.dynamodb": ("polling", "fanout", "kcl3", "dynamodb-streams"),  # what the tables share: status, creation, scans
}


# An API call whose IAM permission has another name: a transaction's items need PutItem, DeleteItem
# and UpdateItem as such, and ConditionCheckItem for a ConditionCheck (there is no TransactWriteItems action).
IAM_ACTION = {"dynamodb:TransactWriteItems": "dynamodb:ConditionCheckItem"}
IAM_PREFIX = {"dynamodbstreams:": "dynamodb:"}  # DynamoDB Streams' actions are DynamoDB's in IAM


def api_calls() -> dict[str, set[str]]:
    """module -> the IAM actions of the AWS API calls it makes on a boto3 client."""
    session = botocore.session.get_session()
    operations: dict[str, list[str]] = {}  # snake_case method -> "service:Operation" of each service that has it
    for service in SERVICES:
        for name in session.get_service_model(service).operation_names:
            operations.setdefault(xform_name(name), []).append(f"{service}:{name}")
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "kcl_mp").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT / "kcl_mp").with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text())
        paginated = {id(call.func): call.args[0].value for call in ast.walk(tree)
                     if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                     and call.func.attr == "get_paginator" and call.args
                     and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):  # a call, or a method handed on to be called
                continue
            receiver = node.value
            name = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", "")
            operation = paginated.get(id(node), node.attr)  # client.get_paginator("scan") calls Scan
            if operation not in operations or name not in CLIENTS:
                continue
            actions = [a for a in operations[operation] if name not in SERVICES or a.startswith(name + ":")]
            assert len(actions) == 1, f"{path.name}:{node.lineno}: which service is {name}.{node.attr}? {actions}"
            action = IAM_ACTION.get(actions[0], actions[0])
            for sdk, iam in IAM_PREFIX.items():
                action = action.replace(sdk, iam, 1) if action.startswith(sdk) else action
            found.setdefault(module, set()).add(action)
    return found


def policy_actions(name: str) -> set[str]:
    policy = json.loads((DEPLOY / "iam" / f"{name}.json").read_text())
    assert policy["Version"] == "2012-10-17"
    actions: set[str] = set()
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow" and statement["Resource"]
        actions.update(statement["Action"])
    return actions


def test_the_code_calls_aws_only_from_the_modules_the_policies_cover():
    calls = api_calls()
    assert set(calls) - TOOLING - {PREFLIGHT} == set(FEATURES), "a module calls AWS: give it a feature (and a policy) here"
    assert "kinesis:GetRecords" in calls["retrieval.kinesis_stream"]
    assert "dynamodb:GetRecords" in calls["retrieval.dynamodb_stream"]
    assert "kinesis:SubscribeToShard" in calls["retrieval.fanout"]


def test_the_preflight_checks_only_calls_the_policies_grant():
    """``kcl-mp check-config`` answers "may this host run?": each call it makes is one a policy grants."""
    granted = set().union(*(policy_actions(p) for p in {p for features in FEATURES.values() for p in features}))
    assert api_calls()[PREFLIGHT] <= granted


@pytest.mark.parametrize("policy", sorted({p for features in FEATURES.values() for p in features}))
def test_each_iam_policy_lists_exactly_what_its_feature_calls(policy):
    calls = api_calls()
    expected = set().union(*(calls[module] for module, policies in FEATURES.items() if policy in policies))
    assert policy_actions(policy) == expected
    for action in expected:
        service, name = action.split(":")
        assert f"`{action}`" in DOC or f"`{name}`" in DOC, f"docs/deploy.md does not name {action}"


# -- the dashboard ----------------------------------------------------------------------


def test_the_dashboard_has_the_four_rows_and_every_panel_queries_prometheus():
    dashboard = json.loads((DEPLOY / "grafana" / "kcl-mp.json").read_text())
    rows = [p["title"].split(" (")[0] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows == ["Fleet", "Per shard", "Processors", "Supervisor"]
    titles = {p["title"] for p in dashboard["panels"]}
    assert {"Leases per worker", "Unclaimed leases", "Records/s", "Bytes/s", "Millis behind latest", "Checkpoint age",
            "CPU", "Memory", "Loop lag", "Renewals"} <= titles
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
