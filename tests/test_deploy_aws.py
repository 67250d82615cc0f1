"""cluster.yaml's nodes and their security group (deploy/aws-cluster-security.yaml) against the
threats in docs/security.md, "The cluster": instance metadata only with IMDSv2 tokens, hop
limit 1 that still reaches Ray's own container, encrypted volumes, no public IP on workers,
HTTPS-only egress, a token fetch that leaves the token in no command line or log."""

from __future__ import annotations

import pathlib
import re

import yaml

from tests.test_job_deploy import node_security_groups

ROOT = pathlib.Path(__file__).resolve().parents[1]


def cluster() -> dict:
    return yaml.safe_load((ROOT / "cluster.yaml").read_text())


def test_every_node_requires_imdsv2_with_a_hop_limit_that_fits_rays_container():
    """HttpTokens required on every node type; hop limit 1, which reaches IMDS only because
    Ray runs its container with the host's network (Ray's own `docker run` line says
    --net=host and cluster.yaml does not override the network)."""
    from ray.autoscaler._private.docker import docker_start_cmds

    config = cluster()
    for name, node_type in config["available_node_types"].items():
        assert node_type["node_config"]["MetadataOptions"] == {
            "HttpEndpoint": "enabled", "HttpTokens": "required", "HttpPutResponseHopLimit": 1}, name
    options = config["docker"]["run_options"]
    assert not any(re.search(r"--net(work)?\b", option) for option in options), options
    command = docker_start_cmds("ray", config["docker"]["image"], {}, "c", options, "ctgscore", "/home/ray", "docker")
    assert " --net=host " in command


def test_every_node_volume_is_encrypted():
    for name, node_type in cluster()["available_node_types"].items():
        mappings = node_type["node_config"].get("BlockDeviceMappings")
        assert mappings, f"{name}: the root volume would take the AMI's default (not encrypted)"
        assert all(m["Ebs"]["Encrypted"] is True for m in mappings), name


def test_workers_get_no_public_ip_and_rays_bootstrap_accepts_their_interfaces():
    """Workers: one network interface each, no public IP, the cluster's security group, a
    subnet; the head's autoscaler reaches them on private IPs (use_internal_ips) while ray up
    still reaches the head on its public one. Ray's own bootstrap step turns the interfaces
    into the subnets and groups it launches with."""
    from ray.autoscaler._private.aws.config import _configure_subnets_and_groups_from_network_interfaces

    config = cluster()
    assert config["provider"]["use_internal_ips"] is True and config["provider"]["use_external_head_ip"] is True
    head = config["available_node_types"][config["head_node_type"]]["node_config"]
    workers = {name: t["node_config"] for name, t in config["available_node_types"].items() if name != config["head_node_type"]}
    assert len(workers) == 2
    for name, node_config in workers.items():
        interfaces = node_config["NetworkInterfaces"]
        assert interfaces and all(i["AssociatePublicIpAddress"] is False for i in interfaces), name
        bootstrapped = _configure_subnets_and_groups_from_network_interfaces(node_config)
        assert bootstrapped["SecurityGroupIds"] == head["SecurityGroupIds"], name
        assert bootstrapped["SubnetIds"] and not set(bootstrapped["SubnetIds"]) & set(head["SubnetIds"]), name
        assert node_security_groups(node_config) == head["SecurityGroupIds"]


def test_token_fetch_leaves_no_trace_in_commands_or_logs():
    """The only commands that touch the token run `python -m ray_jobs.cluster_token` with the
    secret's name and region: no shell tracing, no AWS CLI that prints the value, no token in
    an assignment or an echo (Ray logs each command it runs; `ps` shows every argument)."""
    config = cluster()
    keys = [k for k in config if k.endswith("_commands")]
    commands = [c for k in keys for c in config[k]]
    assert commands and "head_start_ray_commands" in keys
    for command in commands:
        assert not re.search(r"set -[a-z]*x|bash -[a-z]*x|xtrace|get-secret-value|RAY_AUTH_TOKEN=|auth_token", command), command
    fetches = [c for c in commands if "cluster_token" in c]
    assert len(fetches) == 2
    for fetch in fetches:
        assert re.fullmatch(r"python -m ray_jobs\.cluster_token --secret-id [\w/-]+ --region [a-z0-9-]+", fetch), fetch


def test_checkout_synced_to_the_nodes_leaves_out_secrets_and_caches():
    config = cluster()
    assert config["file_mounts"] == {"/home/ray/ctgscore": "."}
    assert {".gitignore", ".rayignore"} <= set(config["rsync_filter"])
    assert {"**/.git", "**/.venv", "**/.env", "**/*.whl"} <= set(config["rsync_exclude"])


def test_security_group_lets_out_https_and_the_group_only():
    template = yaml.safe_load((ROOT / "deploy" / "aws-cluster-security.yaml").read_text())
    resources = template["Resources"]
    [group] = [k for k, r in resources.items() if r["Type"] == "AWS::EC2::SecurityGroup"]
    [https] = resources[group]["Properties"]["SecurityGroupEgress"]
    assert (https["IpProtocol"], https["FromPort"], https["ToPort"], https["CidrIp"]) == (
        "tcp", 443, 443, {"Ref": "HttpsEgressCidr"})
    assert re.fullmatch(template["Parameters"]["HttpsEgressCidr"]["AllowedPattern"], "10.0.0.0/16")
    own = {"Fn::GetAtt": [group, "GroupId"]}
    extra = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::EC2::SecurityGroupEgress"]
    assert extra == [{"GroupId": own, "DestinationSecurityGroupId": own, "IpProtocol": "-1",
                      "Description": extra[0]["Description"]}]
