"""The pods in deploy/ against a hostile workload beside them and a hostile dump inside them
(docs/security.md, "The cluster"): every pod runs as the image's user with no privileges, a
read-only root with writable emptyDirs exactly where Ray and the job write, no Kubernetes API
token but the autoscaler's, CPU and memory limits, a pinned image, the Ray token only where it
is needed, and egress limited to its cluster, DNS and one HTTPS range."""

from __future__ import annotations

import ipaddress
import pathlib
import re

from tests.test_job_deploy import deploy_documents, pod_templates, ray_clusters, selects, walk

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOKEN_SECRET = "ctgscore-ray-token"


def dockerfile() -> str:
    return (ROOT / "deploy" / "Dockerfile").read_text()


def image_user() -> tuple[int, int]:
    """The numeric `USER uid:gid` the image runs as (the last USER line)."""
    [*_, user] = re.findall(r"^USER\s+(\S+)\s*$", dockerfile(), re.M)
    uid, gid = re.fullmatch(r"(\d+):(\d+)", user).groups()
    return int(uid), int(gid)


def image_env() -> dict[str, str]:
    """`ENV KEY=VALUE ...` lines of the Dockerfile (continuation lines joined)."""
    text = re.sub(r"\\\n\s*", " ", dockerfile())
    return {k: v for line in re.findall(r"^ENV\s+(.+)$", text, re.M) for k, v in re.findall(r"(\w+)=(\S+)", line)}


def pods() -> list[tuple[str, str, dict]]:
    """(where, role, pod spec) for every pod deploy/ makes: Ray heads and workers, the RayJob's
    submitter, the CronJobs' pods."""
    found = []
    for name, spec, doc in ray_clusters():
        head, *workers = pod_templates(spec)
        found.append((f"{name} head", "head", head["spec"]))
        found += [(f"{name} worker", "worker", w["spec"]) for w in workers]
        if doc["kind"] == "RayJob":
            found.append((f"{name} submitter", "submitter", doc["spec"]["submitterPodTemplate"]["spec"]))
    for name, doc in deploy_documents():
        if doc["kind"] == "CronJob":
            found.append((name, "submitter", doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]))
    return found


def containers() -> list[tuple[str, dict, dict]]:
    """(where, container or autoscaler options, its pod spec): the autoscaler sidecar counts."""
    found = [(f"{where} {c['name']}", c, pod) for where, _, pod in pods() for c in pod["containers"]]
    for name, spec, _ in ray_clusters():
        head = spec["headGroupSpec"]["template"]["spec"]
        found.append((f"{name} autoscaler", spec["autoscalerOptions"], head))
    return found


def test_inventory():
    assert sorted(role for _, role, _ in pods()) == ["head", "head", "submitter", "submitter", "submitter", "worker", "worker"]
    assert len(containers()) == 9


def test_every_pod_runs_as_the_images_user_with_no_privileges():
    uid, gid = image_user()
    assert uid != 0 and (uid, gid) == (1000, 100)  # rayproject/ray's `ray` user and `users` group
    for where, _, pod in pods():
        context = pod["securityContext"]
        assert context["runAsNonRoot"] is True and context["runAsUser"] == uid and context["runAsGroup"] == gid, where
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, where
    for where, container, _ in containers():
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True}, where


def test_read_only_root_with_emptydirs_where_ray_and_the_job_write():
    """Ray 2.60 writes its session folder (logs, sockets, spilled objects, a job's working_dir)
    under /tmp/ray; the job and its libraries write caches under ~/.cache (models, Hugging
    Face, Triton, torch); the submitter packs its upload in /tmp. Each is an emptyDir with a
    size limit, and every cache variable the image sets points into one of them."""
    writable_env = {key: value for key, value in image_env().items() if key.endswith(("CACHE", "DIR", "HOME"))}
    assert {"CTGSCORE_CACHE", "TRITON_CACHE_DIR", "MPLCONFIGDIR"} <= set(writable_env)
    for where, container, pod in containers():
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        mounts = {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", [])}
        assert "emptyDir" in mounts.get("/tmp", {}), where
        assert all(v["emptyDir"].get("sizeLimit") for v in mounts.values() if "emptyDir" in v), where
        if where.endswith(("ray-head", "ray-worker")):
            for key, path in writable_env.items():
                assert any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounts), (where, key, path)


def test_only_the_autoscaler_gets_the_kubernetes_api_token():
    for where, _, pod in pods():
        assert pod["automountServiceAccountToken"] is False, where
    token_volumes = set()
    for where, container, pod in containers():
        sources = {v["name"] for v in pod.get("volumes", [])
                   if any("serviceAccountToken" in s for s in v.get("projected", {}).get("sources", []))}
        mounted = {m["name"] for m in container.get("volumeMounts", [])} & sources
        if where.endswith("autoscaler"):
            assert len(mounted) == 1, where
            [name] = mounted
            [mount] = [m for m in container["volumeMounts"] if m["name"] == name]
            assert mount == {"name": name, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True}
            token_volumes.add(where)
        else:
            assert not mounted, where
    assert len(token_volumes) == 2
    for where, role, pod in pods():  # the S3 role (IRSA) only where the job runs
        assert ("serviceAccountName" in pod) == (role in ("head", "worker")), where


def test_every_container_has_cpu_and_memory_limits():
    for where, container, _ in containers():
        resources = container["resources"]
        assert {"cpu", "memory"} <= set(resources["limits"]) and {"cpu", "memory"} <= set(resources["requests"]), where


def test_every_image_is_pinned_and_the_same_everywhere():
    pinned = re.compile(r"[\w./-]+(:\d[\w.-]*|@sha256:[0-9a-f]{64})")
    images = {c["image"] for _, c, _ in containers() if "image" in c}
    assert len(images) == 1 and all(pinned.fullmatch(i) for i in images), images
    [base] = re.findall(r"^FROM\s+(\S+)", dockerfile(), re.M)
    assert pinned.fullmatch(base) and "latest" not in base, base
    text = "\n".join(p.read_text() for p in [ROOT / "cluster.yaml", *(ROOT / "deploy").glob("*.yaml")])
    assert not re.search(r"image:\s*\S+:latest\b", text)


def test_the_token_secret_reaches_only_the_pods_that_submit():
    """The Secret is named in two places only: the clusters' authOptions (KubeRay hands it to
    the Ray containers and the RayJob's submitter) and the CronJobs' RAY_AUTH_TOKEN by
    secretKeyRef; never envFrom, never a volume."""
    for name, doc in deploy_documents():
        for mapping in walk(doc):
            for key, value in mapping.items():
                if value != TOKEN_SECRET:
                    continue
                if key == "secretName":
                    assert mapping == {"mode": "token", "secretName": TOKEN_SECRET}, name
                else:
                    assert key == "name" and mapping == {"name": TOKEN_SECRET, "key": "auth_token"}, name
                    assert doc["kind"] == "CronJob", name
            assert "envFrom" not in mapping, name


def _rule_kind(rule: dict, own: dict) -> str:
    """What an egress rule lets out: 'own' (the pod's cluster), 'dns', 'https' (one address
    range), or the rule itself when it is none of these."""
    peers, ports = rule.get("to"), {(p["protocol"], p["port"]) for p in rule.get("ports", [])}
    assert peers, f"an egress rule with no `to` lets everything out: {rule}"
    if all(set(p) == {"podSelector"} and p["podSelector"] == {"matchLabels": own} for p in peers):
        return "own" if not ports else f"own:{sorted(ports)}"
    if ports == {("UDP", 53), ("TCP", 53)} and peers == [{
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}]:
        return "dns"
    if ports == {("TCP", 443)} and all(set(p) == {"ipBlock"} for p in peers):
        for peer in peers:
            network = ipaddress.ip_network(peer["ipBlock"]["cidr"])
            assert network.prefixlen >= 8 and ipaddress.ip_address("169.254.169.254") not in network, peer
        return "https"
    return repr(rule)


def test_egress_is_the_cluster_dns_and_one_https_range():
    """Every pod is under an Egress policy. Ray pods: their own cluster, DNS, HTTPS to the
    range that holds S3/STS/the API server (never the world, never the metadata address).
    Submitters: their cluster's job server (8265) and DNS, nothing else; nothing comes in."""
    policies = [doc for _, doc in deploy_documents() if doc["kind"] == "NetworkPolicy"]
    cronjob_labels = {doc["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]
                      for _, doc in deploy_documents() if doc["kind"] == "CronJob"}
    for name, spec, doc in ray_clusters():
        own = spec["headGroupSpec"]["template"]["metadata"]["labels"]
        ray_pods = [t["metadata"]["labels"] for t in pod_templates(spec)]
        submitter = {"batch.kubernetes.io/job-name": name} if doc["kind"] == "RayJob" else \
            {"app.kubernetes.io/name": cronjob_labels.pop()}
        for labels, expected in [(pod, {"own", "dns", "https"}) for pod in ray_pods] + \
                [(submitter, {"own:[('TCP', 8265)]", "dns"})]:
            selecting = [p for p in policies if selects(p["spec"]["podSelector"], labels)]
            assert selecting and all("Egress" in p["spec"]["policyTypes"] for p in selecting), (name, labels)
            kinds = [_rule_kind(rule, own) for p in selecting for rule in p["spec"].get("egress", [])]
            assert sorted(kinds) == sorted(expected), (name, labels, kinds)
            if expected == {"own:[('TCP', 8265)]", "dns"}:
                assert all(p["spec"]["ingress"] == [] for p in selecting), (name, labels)
    assert not cronjob_labels
