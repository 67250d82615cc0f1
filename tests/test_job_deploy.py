"""Cluster and deployment files: cluster.yaml passes Ray's own autoscaler validation, the
KubeRay RayJob and nightly schedule have the shape the issue asks for, and every example job
config passes the job's strict config validation."""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml

from ray_jobs.config import load_config

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_cluster_yaml_is_a_valid_ray_autoscaler_config():
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    validate_config(prepare_config(config))  # Ray fills its defaults, then checks the schema
    head = config["available_node_types"][config["head_node_type"]]
    assert head["resources"] == {"CPU": 0}
    assert any("--num-cpus=0" in command for command in config["head_start_ray_commands"])
    workers = [t for name, t in config["available_node_types"].items() if name != config["head_node_type"]]
    # GPU workers for the model metrics' pools, CPU workers for the rule metrics' pools: each from 0
    assert len(workers) == 2 and all(w["min_workers"] == 0 and w["max_workers"] >= 1 for w in workers)
    assert config["docker"]["image"].startswith("rayproject/ray:2.60.0") and config["docker"]["image"].endswith("-gpu")
    assert config["idle_timeout_minutes"] > 0
    assert any("pip install" in c and "ctgscore" in c for c in config["setup_commands"])


def test_rayjob_and_nightly_schedule():
    rayjob = yaml.safe_load((ROOT / "deploy" / "rayjob.yaml").read_text())
    assert rayjob["kind"] == "RayJob" and rayjob["apiVersion"] == "ray.io/v1"
    assert rayjob["spec"]["entrypoint"].startswith("python -m ray_jobs.score_corpus --config examples/")
    cluster = rayjob["spec"]["rayClusterSpec"]
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    (gpu,) = cluster["workerGroupSpecs"]
    assert gpu["minReplicas"] == 0 and gpu["maxReplicas"] >= 1
    assert gpu["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    config_path = rayjob["spec"]["entrypoint"].split("--config ")[1].split()[0]
    load_config(ROOT / config_path)

    cron = yaml.safe_load((ROOT / "deploy" / "nightly-cronjob.yaml").read_text())
    command = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert "ray job submit" in command and "--submission-id rescore-$(date +%F)" in command
    line = [text for text in (ROOT / "deploy" / "nightly.cron").read_text().splitlines() if text and not text.startswith("#")]
    assert len(line) == 1 and len(line[0].split()[:5]) == 5 and "--submission-id rescore-$(date +\\%F)" in line[0]


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_example_job_configs_validate(path):
    config = load_config(path)
    assert config.metrics


# --- access: token authentication, the dashboard, the network (docs/security.md) ---------------

RAY_PORTS = {6379, 8265, 10001}  # GCS, job server / dashboard, Ray client
TOKEN_SECRET = "ctgscore-ray-token"


def deploy_documents() -> list[tuple[str, dict]]:
    """(file name, object) for every Kubernetes object in deploy/ (the AWS template aside)."""
    docs = []
    for path in sorted((ROOT / "deploy").glob("*.yaml")):
        if path.name.startswith("aws-"):
            continue
        docs += [(path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    return docs


def walk(node):
    """Every mapping inside a YAML document."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def ray_clusters() -> list[tuple[str, dict, dict]]:
    """(name the cluster's objects carry, cluster spec, the object) for each RayCluster and RayJob."""
    found = []
    for _, doc in deploy_documents():
        if doc["kind"] == "RayCluster":
            found.append((doc["metadata"]["name"], doc["spec"], doc))
        elif doc["kind"] == "RayJob":
            found.append((doc["metadata"]["name"], doc["spec"]["rayClusterSpec"], doc))
    return found


def pod_templates(spec: dict) -> list[dict]:
    return [spec["headGroupSpec"]["template"]] + [group["template"] for group in spec.get("workerGroupSpecs", [])]


def selects(selector: dict, labels: dict) -> bool:
    match = selector.get("matchLabels") or {}
    return not selector.get("matchExpressions") and bool(match) and all(labels.get(k) == v for k, v in match.items())


@pytest.mark.parametrize("name,doc", deploy_documents(), ids=lambda v: v if isinstance(v, str) else v.get("kind"))
def test_deploy_manifests_validate_against_their_schemas(name, doc):
    from tests.deploy_schemas import validate

    assert validate(doc) == [], name


def test_deploy_schemas_reject_what_they_should():
    """The schemas are not vacuous: a misspelt field, a wrong enum value, an inline token beside
    its secretKeyRef, a port out of range and an unknown kind each fail."""
    import copy

    from tests.deploy_schemas import validate

    docs = {doc["kind"]: doc for _, doc in deploy_documents()}
    broken = copy.deepcopy(docs["RayCluster"])
    broken["spec"]["authOptions"]["mode"] = "tokn"
    broken["spec"]["headGroupSpec"]["serviceTyp"] = "ClusterIP"
    assert len(validate(broken)) == 2
    cron = copy.deepcopy(docs["CronJob"])
    container = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    [token_env] = [e for e in container["env"] if e["name"] == "RAY_AUTH_TOKEN"]
    token_env["value"] = "inline"
    assert any("/env/" in m and "should not be valid" in m for m in validate(cron))
    [ray_policy] = [doc for _, doc in deploy_documents() if doc["metadata"]["name"] == "ctgscore-ray"]
    policy = copy.deepcopy(ray_policy)
    policy["spec"]["ingress"][1]["ports"][0]["port"] = 70000
    assert validate(policy)
    assert validate({**ray_policy, "kind": "Ingress"})
    for field, value in (("runAsUser", "1000"), ("seccompProfile", {"type": "Default"})):
        pod = copy.deepcopy(docs["RayCluster"])
        pod["spec"]["headGroupSpec"]["template"]["spec"]["securityContext"][field] = value
        assert len(validate(pod)) == 1, field
    pod = copy.deepcopy(docs["RayCluster"])
    pod["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystm"] = True
    assert len(validate(pod)) == 1
    egress = copy.deepcopy(ray_policy)
    egress["spec"]["egress"][1]["ports"][0]["protocol"] = "udp"
    assert len(validate(egress)) == 1


def test_ray_token_only_from_a_kubernetes_secret():
    """Every Ray cluster asks for a token (KubeRay authOptions) from the one Secret; every
    submitter reads that Secret by secretKeyRef; no manifest holds a token."""
    clusters = ray_clusters()
    assert {name for name, _, _ in clusters} == {"ctgscore", "ctgscore-rescore"}
    for _, spec, _ in clusters:
        assert spec["authOptions"] == {"mode": "token", "secretName": TOKEN_SECRET}
    submitters = 0
    for name, doc in deploy_documents():
        for mapping in walk(doc):
            if mapping.get("name") == "RAY_AUTH_TOKEN":
                assert "value" not in mapping, name
                assert mapping["valueFrom"] == {"secretKeyRef": {"name": TOKEN_SECRET, "key": "auth_token"}}, name
                submitters += 1
            if mapping.get("name") == "RAY_AUTH_MODE":
                assert mapping == {"name": "RAY_AUTH_MODE", "value": "token"}, name
    assert submitters == 2  # the two CronJobs (KubeRay sets the Ray containers' own from authOptions)
    text = "\n".join(p.read_text() for p in [ROOT / "cluster.yaml", *(ROOT / "deploy").iterdir()])
    assert not re.search(r"\b[0-9a-f]{32,}\b", text), "something like a token in a deployment file"
    assert "RAY_AUTH_MODE=disabled" not in text and "mode: disabled" not in text


def test_head_service_is_cluster_ip_and_cronjobs_submit_to_it():
    services = {}
    for name, spec, _ in ray_clusters():
        assert spec["headGroupSpec"]["serviceType"] == "ClusterIP", name
        services[f"{name}-head-svc"] = name  # KubeRay's name for a RayCluster's head Service
    for name, doc in deploy_documents():
        if doc["kind"] == "CronJob":
            command = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"][0]
            address = re.search(r"--address (\S+)", command).group(1)
            assert address == "http://ctgscore-head-svc:8265" and "ctgscore-head-svc" in services, name
    assert not any("NodePort" in str(doc) or "LoadBalancer" in str(doc) for _, doc in deploy_documents())


def test_network_policies_admit_only_the_cluster_and_its_submitters():
    """For each Ray cluster, a NetworkPolicy selects all its pods (head and workers) for ingress;
    a rule open on every port admits only the cluster's own pods; every other rule is limited to
    Ray's ports (here the job server's, 8265) and admits pods by label, no address range; the
    submitting CronJobs' pods (or the RayJob's submitter) are admitted to 8265."""
    policies = [doc for _, doc in deploy_documents() if doc["kind"] == "NetworkPolicy"]
    cronjob_pods = [doc["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
                    for _, doc in deploy_documents() if doc["kind"] == "CronJob"]
    assert len(cronjob_pods) == 2
    for name, spec, doc in ray_clusters():
        pods = [t["metadata"]["labels"] for t in pod_templates(spec)]
        [policy] = [p for p in policies if all(selects(p["spec"]["podSelector"], labels) for labels in pods)]
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
        submitters = cronjob_pods if doc["kind"] == "RayCluster" else [{"batch.kubernetes.io/job-name": name}]
        admitted_to_job_server = []
        for rule in policy["spec"]["ingress"]:
            peers = rule["from"]
            assert peers and not any("ipBlock" in peer for peer in peers), name
            if "ports" not in rule:  # every port: the cluster's own pods only
                assert all(set(peer) == {"podSelector"} and selects(peer["podSelector"], pods[0]) for peer in peers)
                assert all(all(selects(peer["podSelector"], labels) for labels in pods) for peer in peers)
                continue
            ports = {port["port"] for port in rule["ports"]}
            assert ports <= RAY_PORTS and all(port["protocol"] == "TCP" for port in rule["ports"]), name
            if 8265 in ports:
                admitted_to_job_server += [peer["podSelector"] for peer in peers if "namespaceSelector" not in peer]
        for labels in submitters:
            assert any(selects(selector, labels) for selector in admitted_to_job_server), (name, labels)
        stranger = {"app.kubernetes.io/name": "something-else"}
        assert not any(selects(selector, stranger) for selector in admitted_to_job_server)


def node_security_groups(node_config: dict) -> list[str]:
    """A node type's security groups: SecurityGroupIds, or its network interfaces' Groups."""
    if "NetworkInterfaces" in node_config:
        return [g for interface in node_config["NetworkInterfaces"] for g in interface.get("Groups", [])]
    return node_config.get("SecurityGroupIds") or []


def test_cluster_yaml_asks_for_a_token_and_keeps_the_dashboard_on_loopback():
    """Every node fetches the token from the secret store, then starts Ray with token auth; the
    dashboard listens on the head's 127.0.0.1; every node type has the explicit security group
    (so Ray creates none with SSH open to the world); no token in the file."""
    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    template = yaml.safe_load((ROOT / "deploy" / "aws-cluster-security.yaml").read_text())
    secret_name = template["Parameters"]["TokenSecretName"]["Default"]
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        commands = config[key]
        starts = [i for i, c in enumerate(commands) if "ray start" in c]
        fetches = [i for i, c in enumerate(commands) if c.startswith("python -m ray_jobs.cluster_token ")]
        assert len(starts) == 1 and len(fetches) == 1 and fetches[0] < starts[0], key
        assert f"--secret-id {secret_name} " in commands[fetches[0]] + " "
        assert commands[starts[0]].startswith("RAY_AUTH_MODE=token ray start "), key
    [head_start] = [c for c in config["head_start_ray_commands"] if "ray start" in c]
    assert "--dashboard-host=127.0.0.1" in head_start
    assert not any("0.0.0.0" in c for c in config["head_start_ray_commands"] + config["worker_start_ray_commands"])
    groups = [node_security_groups(t["node_config"]) for t in config["available_node_types"].values()]
    assert all(g and g == groups[0] and all(re.fullmatch(r"sg-[0-9a-f]{8,17}", s) for s in g) for g in groups)
    assert not re.search(r"RAY_AUTH_TOKEN=", (ROOT / "cluster.yaml").read_text())  # a path to it, never the value


def test_aws_template_opens_ssh_to_the_admins_and_ray_ports_to_the_group_only():
    """deploy/aws-cluster-security.yaml: SSH from the AdminCidr parameter only; the only other
    way in is from the group itself; the token secret is generated (no value in the file) and
    the nodes' role may read that one secret and nothing else."""
    template = yaml.safe_load((ROOT / "deploy" / "aws-cluster-security.yaml").read_text())
    resources = template["Resources"]
    groups = {k for k, r in resources.items() if r["Type"] == "AWS::EC2::SecurityGroup"}
    assert len(groups) == 1
    [group] = groups
    [ssh] = resources[group]["Properties"]["SecurityGroupIngress"]
    assert (ssh["IpProtocol"], ssh["FromPort"], ssh["ToPort"], ssh["CidrIp"]) == ("tcp", 22, 22, {"Ref": "AdminCidr"})
    assert "Default" not in template["Parameters"]["AdminCidr"]  # no silent 0.0.0.0/0
    extra = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::EC2::SecurityGroupIngress"]
    own = {"Fn::GetAtt": [group, "GroupId"]}
    assert extra and all(p["GroupId"] == own and p["SourceSecurityGroupId"] == own and "CidrIp" not in p for p in extra)
    assert not any("CidrIp" in str(r) and r is not resources[group] for r in resources.values())
    [secret] = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::SecretsManager::Secret"]
    assert "GenerateSecretString" in secret and "SecretString" not in secret
    [policy] = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::IAM::Policy"]
    [statement] = policy["PolicyDocument"]["Statement"]
    [secret_key] = [k for k, r in resources.items() if r["Type"] == "AWS::SecretsManager::Secret"]
    assert statement == {"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": {"Ref": secret_key}}
