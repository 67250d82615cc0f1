"""JSON schemas (draft 2020-12) for the Kubernetes and KubeRay objects in `deploy/`: the fields
ctgscore's manifests use, with their types and allowed values, and no other field (an unknown
or misspelt key fails). Written for these tests from the Kubernetes API reference (batch/v1
CronJob, networking.k8s.io/v1 NetworkPolicy, core/v1 pod templates, env `secretKeyRef`, pod and
container security contexts, projected volumes) and
KubeRay's ray.io/v1 API reference (RayCluster, RayJob, `authOptions`): no schema of either is
available offline here, so these cover what we rely on, not the whole API.

`validate(doc)` picks the schema by apiVersion and kind and returns the error messages (empty:
valid); a kind without a schema is an error too.
"""

from __future__ import annotations

import jsonschema


def _obj(properties: dict, required: tuple = ()) -> dict:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


STR = {"type": "string", "minLength": 1}
DNS_NAME = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"}
DNS_SUBDOMAIN = {"type": "string", "maxLength": 253, "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"}  # ConfigMap names
LABEL_KEY = r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
LABELS = {"type": "object", "propertyNames": {"pattern": LABEL_KEY},
          "additionalProperties": {"type": "string", "pattern": r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"}}
QUANTITY = {"type": ["string", "integer"], "pattern": r"^[0-9.]+([KMGTPE]i?|m)?$"}
PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
VOLUME_MOUNTS = {"type": "array", "items": _obj({"name": DNS_NAME, "mountPath": STR, "readOnly": {"type": "boolean"}},
                                                ("name", "mountPath"))}
RESOURCES = _obj({"requests": {"type": "object", "additionalProperties": QUANTITY},
                  "limits": {"type": "object", "additionalProperties": QUANTITY}})
SECCOMP = _obj({"type": {"enum": ["RuntimeDefault", "Localhost", "Unconfined"]}, "localhostProfile": STR}, ("type",))
USER_ID = {"type": "integer", "minimum": 0, "maximum": 2147483647}
NETWORK_POLICY_PORTS = {"type": "array", "items": _obj({
    "protocol": {"enum": ["TCP", "UDP", "SCTP"]},
    "port": {"oneOf": [PORT, {"type": "string", "pattern": "^[a-z0-9-]{1,15}$"}]}, "endPort": PORT})}

DEFS = {
    "metadata": _obj({"name": DNS_NAME, "namespace": DNS_NAME, "labels": LABELS,
                      "annotations": {"type": "object", "additionalProperties": {"type": "string"}}}, ("name",)),
    "templateMetadata": _obj({"labels": LABELS, "annotations": {"type": "object"}}),
    "labelSelector": _obj({"matchLabels": LABELS, "matchExpressions": {"type": "array", "items": _obj(
        {"key": STR, "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
         "values": {"type": "array", "items": {"type": "string"}}}, ("key", "operator"))}}),
    "envVar": {
        **_obj({"name": {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"}, "value": {"type": "string"},
                "valueFrom": _obj({"secretKeyRef": _obj({"name": DNS_NAME, "key": STR, "optional": {"type": "boolean"}},
                                                         ("name", "key"))})}, ("name",)),
        "not": {"required": ["value", "valueFrom"]},  # one source, not both
    },
    # core/v1 SecurityContext (a container's) and PodSecurityContext (a pod's)
    "containerSecurityContext": _obj({
        "allowPrivilegeEscalation": {"type": "boolean"}, "privileged": {"type": "boolean"},
        "readOnlyRootFilesystem": {"type": "boolean"}, "runAsNonRoot": {"type": "boolean"},
        "runAsUser": USER_ID, "runAsGroup": USER_ID, "seccompProfile": SECCOMP,
        "capabilities": _obj({"drop": {"type": "array", "items": {"type": "string", "pattern": "^[A-Z_]+$"}},
                              "add": {"type": "array", "items": {"type": "string", "pattern": "^[A-Z_]+$"}}})}),
    "podSecurityContext": _obj({
        "runAsNonRoot": {"type": "boolean"}, "runAsUser": USER_ID, "runAsGroup": USER_ID, "fsGroup": USER_ID,
        "seccompProfile": SECCOMP}),
    "container": _obj({
        "name": DNS_NAME, "image": STR, "workingDir": STR,
        "imagePullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
        "securityContext": {"$ref": "#/$defs/containerSecurityContext"},
        "command": {"type": "array", "items": {"type": "string"}}, "args": {"type": "array", "items": {"type": "string"}},
        "env": {"type": "array", "items": {"$ref": "#/$defs/envVar"}},
        "envFrom": {"type": "array", "items": _obj({"secretRef": _obj({"name": DNS_NAME}, ("name",))})},
        "resources": RESOURCES,
        "ports": {"type": "array", "items": _obj({"containerPort": PORT, "name": {"type": "string", "maxLength": 15},
                                                  "protocol": {"enum": ["TCP", "UDP", "SCTP"]}}, ("containerPort",))},
        "volumeMounts": VOLUME_MOUNTS,
    }, ("name", "image")),
    "podSpec": _obj({
        "containers": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/container"}},
        "serviceAccountName": DNS_NAME, "restartPolicy": {"enum": ["Always", "OnFailure", "Never"]},
        "automountServiceAccountToken": {"type": "boolean"},
        "securityContext": {"$ref": "#/$defs/podSecurityContext"},
        "volumes": {"type": "array", "items": {**_obj({
            "name": DNS_NAME, "emptyDir": _obj({"sizeLimit": QUANTITY, "medium": {"enum": ["", "Memory"]}}),
            "persistentVolumeClaim": _obj({"claimName": DNS_NAME, "readOnly": {"type": "boolean"}}, ("claimName",)),
            "secret": _obj({"secretName": DNS_NAME}, ("secretName",)),
            "projected": _obj({"sources": {"type": "array", "minItems": 1, "items": {**_obj({
                "serviceAccountToken": _obj({"path": STR, "audience": STR,
                                             "expirationSeconds": {"type": "integer", "minimum": 600}}, ("path",)),
                "configMap": _obj({"name": DNS_SUBDOMAIN, "items": {"type": "array", "items": _obj(
                    {"key": STR, "path": STR}, ("key", "path"))}}, ("name",)),
                "downwardAPI": _obj({"items": {"type": "array", "items": _obj(
                    {"path": STR, "fieldRef": _obj({"fieldPath": STR}, ("fieldPath",))}, ("path", "fieldRef"))}}),
            }), "minProperties": 1, "maxProperties": 1}}}, ("sources",))},
            ("name",)), "minProperties": 2, "maxProperties": 2}},
        "tolerations": {"type": "array", "items": _obj({"key": STR, "operator": {"enum": ["Exists", "Equal"]},
                                                        "value": {"type": "string"},
                                                        "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]}})},
    }, ("containers",)),
    "podTemplate": _obj({"metadata": {"$ref": "#/$defs/templateMetadata"}, "spec": {"$ref": "#/$defs/podSpec"}}, ("spec",)),
    # KubeRay passes rayStartParams to `ray start --KEY=VALUE`: values are strings
    "rayStartParams": {"type": "object", "additionalProperties": {"type": "string"}},
    "rayClusterSpec": _obj({
        "rayVersion": {"type": "string", "pattern": r"^\d+\.\d+\.\d+$"},
        "authOptions": _obj({"mode": {"enum": ["disabled", "token"]}, "secretName": DNS_NAME,
                             "enableK8sTokenAuth": {"type": "boolean"}}),
        "enableInTreeAutoscaling": {"type": "boolean"},
        "autoscalerOptions": _obj({"idleTimeoutSeconds": {"type": "integer", "minimum": 0},
                                   "upscalingMode": {"enum": ["Default", "Aggressive", "Conservative"]},
                                   "resources": RESOURCES, "volumeMounts": VOLUME_MOUNTS,
                                   "securityContext": {"$ref": "#/$defs/containerSecurityContext"}}),
        "headGroupSpec": _obj({"serviceType": {"enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
                               "rayStartParams": {"$ref": "#/$defs/rayStartParams"},
                               "template": {"$ref": "#/$defs/podTemplate"}}, ("template",)),
        "workerGroupSpecs": {"type": "array", "items": _obj({
            "groupName": DNS_NAME, "replicas": {"type": "integer", "minimum": 0},
            "minReplicas": {"type": "integer", "minimum": 0}, "maxReplicas": {"type": "integer", "minimum": 0},
            "rayStartParams": {"$ref": "#/$defs/rayStartParams"}, "template": {"$ref": "#/$defs/podTemplate"}},
            ("groupName", "template"))},
    }, ("headGroupSpec",)),
    "networkPolicyPeer": {**_obj({"podSelector": {"$ref": "#/$defs/labelSelector"},
                                  "namespaceSelector": {"$ref": "#/$defs/labelSelector"},
                                  "ipBlock": _obj({"cidr": STR, "except": {"type": "array", "items": STR}}, ("cidr",))}),
                          "minProperties": 1},
}


def _kind(api_version: str, kind: str, spec: dict) -> dict:
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$defs": DEFS, **_obj(
        {"apiVersion": {"const": api_version}, "kind": {"const": kind}, "metadata": {"$ref": "#/$defs/metadata"},
         "spec": spec}, ("apiVersion", "kind", "metadata", "spec"))}


SCHEMAS = {
    ("ray.io/v1", "RayCluster"): _kind("ray.io/v1", "RayCluster", {"$ref": "#/$defs/rayClusterSpec"}),
    ("ray.io/v1", "RayJob"): _kind("ray.io/v1", "RayJob", _obj({
        "entrypoint": STR, "submissionMode": {"enum": ["K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"]},
        "shutdownAfterJobFinishes": {"type": "boolean"}, "ttlSecondsAfterFinished": {"type": "integer", "minimum": 0},
        "activeDeadlineSeconds": {"type": "integer", "minimum": 1}, "backoffLimit": {"type": "integer", "minimum": 0},
        "submitterPodTemplate": {"$ref": "#/$defs/podTemplate"},
        "rayClusterSpec": {"$ref": "#/$defs/rayClusterSpec"}}, ("entrypoint",))),
    ("networking.k8s.io/v1", "NetworkPolicy"): _kind("networking.k8s.io/v1", "NetworkPolicy", _obj({
        "podSelector": {"$ref": "#/$defs/labelSelector"},
        "policyTypes": {"type": "array", "items": {"enum": ["Ingress", "Egress"]}, "uniqueItems": True},
        "ingress": {"type": "array", "items": _obj({
            "from": {"type": "array", "items": {"$ref": "#/$defs/networkPolicyPeer"}}, "ports": NETWORK_POLICY_PORTS})},
        "egress": {"type": "array", "items": _obj({
            "to": {"type": "array", "items": {"$ref": "#/$defs/networkPolicyPeer"}}, "ports": NETWORK_POLICY_PORTS})},
    }, ("podSelector",))),
    ("batch/v1", "CronJob"): _kind("batch/v1", "CronJob", _obj({
        "schedule": {"type": "string", "pattern": r"^\S+( \S+){4}$"},
        "concurrencyPolicy": {"enum": ["Allow", "Forbid", "Replace"]},
        "startingDeadlineSeconds": {"type": "integer", "minimum": 0},
        "jobTemplate": _obj({"spec": _obj({"backoffLimit": {"type": "integer", "minimum": 0},
                                           "template": {"$ref": "#/$defs/podTemplate"}}, ("template",))}, ("spec",)),
    }, ("schedule", "jobTemplate"))),
}


def validate(doc: dict) -> list[str]:
    """Error messages (with the path of each) for one manifest; [] when it is valid."""
    if not isinstance(doc, dict):
        return [f"not a mapping: {type(doc).__name__}"]
    schema = SCHEMAS.get((doc.get("apiVersion"), doc.get("kind")))
    if schema is None:
        return [f"no schema for apiVersion {doc.get('apiVersion')!r} kind {doc.get('kind')!r}"]
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{'/'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}"
            for error in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))]
