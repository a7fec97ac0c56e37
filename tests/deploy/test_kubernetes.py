"""deploy/kubernetes: renders with kustomize, validates against Kubernetes and CRD schemas, stays locked down."""

from __future__ import annotations

import copy
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.helpers.tools import require, require_tool
from trainmon import __version__
from trainmon.wire import DEFAULT_SOCKET

REPO = Path(__file__).resolve().parents[2]
KUBERNETES = REPO / "deploy" / "kubernetes"
OVERLAY = KUBERNETES / "overlays" / "kube-prometheus-stack"
POD_RESOURCES = KUBERNETES / "overlays" / "pod-resources"
KUBELET_DIR = "/var/lib/kubelet/pod-resources"
EXAMPLE_POD = KUBERNETES / "examples" / "training-pod.yaml"
CRDS = REPO / "tests" / "fixtures" / "crds"
CRD_FILES = {"ServiceMonitor": "monitoring.coreos.com_servicemonitors.yaml",
             "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml"}
# The oldest Kubernetes still in support and the newest the validator knows.
KUBERNETES_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
SOCKET_GID = 10001


def kustomize(directory: Path) -> list[dict[str, Any]]:
    kubectl = require_tool("kubectl")
    result = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("trainmon_k8s_generate", KUBERNETES / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return kustomize(KUBERNETES)


@pytest.fixture(scope="module")
def overlay() -> list[dict[str, Any]]:
    return kustomize(OVERLAY)


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [found] = [o for o in objects if o["kind"] == kind]
    return found


def closed(schema: Any) -> Any:
    """The schema with unknown fields refused, where the API server would silently prune them."""
    if isinstance(schema, dict):
        schema = {key: closed(value) for key, value in schema.items()}
        if ("properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    return schema


def crd_schema(kind: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / CRD_FILES[kind]).read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return closed(version["schema"]["openAPIV3Schema"])


def validate_custom(obj: dict[str, Any], schema: dict[str, Any]) -> None:
    """OpenAPI v3 is close to JSON Schema draft 7; the metaschema check is skipped because the CRDs
    carry Go regular expressions (`^(?i)...`) that Python's `re` would refuse as patterns."""
    jsonschema.Draft7Validator(schema).validate(obj)


def test_base_renders_the_expected_objects(base: list[dict[str, Any]]) -> None:
    """`kubectl kustomize deploy/kubernetes` gives every object the issue lists, in one namespace."""
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in base if o["kind"] != "ConfigMap")
    dashboards = [o for o in base if o["kind"] == "ConfigMap"]

    assert kinds == [("DaemonSet", "trainmon"), ("Namespace", "trainmon"), ("PrometheusRule", "trainmon"),
                     ("Service", "trainmon"), ("ServiceAccount", "trainmon"), ("ServiceMonitor", "trainmon")]
    assert {o["metadata"].get("namespace") for o in base if o["kind"] != "Namespace"} == {"trainmon"}
    assert len(dashboards) == len(list((REPO / "grafana" / "dashboards").glob("*.json")))


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_builtin_objects_validate_against_kubernetes_schemas(base: list[dict[str, Any]], version: str) -> None:
    """Every built-in object, and the example training pod, is valid for Kubernetes (strict: no unknown fields)."""
    objects = [o for o in base if o["kind"] not in CRD_FILES] + [yaml.safe_load(EXAMPLE_POD.read_text())]

    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


def test_kubernetes_validation_catches_a_misspelt_field(base: list[dict[str, Any]]) -> None:
    """Strict validation refuses an unknown field, so the test above can fail."""
    daemonset = copy.deepcopy(one(base, "DaemonSet"))
    daemonset["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}

    with pytest.raises(kubernetes_validate.ValidationError, match="securityContxt"):
        kubernetes_validate.validate(daemonset, KUBERNETES_VERSIONS[0], strict=True)


@pytest.mark.parametrize("kind", sorted(CRD_FILES))
def test_custom_resources_validate_against_the_operator_crds(base: list[dict[str, Any]],
                                                            overlay: list[dict[str, Any]], kind: str) -> None:
    """ServiceMonitor and PrometheusRule match prometheus-operator's v1 schemas, with no field it would prune."""
    schema = crd_schema(kind)

    for objects in (base, overlay):
        validate_custom(one(objects, kind), schema)


def test_crd_validation_catches_a_misspelt_field(base: list[dict[str, Any]]) -> None:
    """The closed CRD schema refuses a field the operator would drop, so the test above can fail."""
    monitor = copy.deepcopy(one(base, "ServiceMonitor"))
    monitor["spec"]["endpoints"][0]["intervall"] = "15s"

    with pytest.raises(jsonschema.ValidationError, match="intervall"):
        validate_custom(monitor, crd_schema("ServiceMonitor"))


def test_daemonset_security(base: list[dict[str, Any]]) -> None:
    """The DaemonSet's scheduling and security settings, one by one."""
    pod = one(base, "DaemonSet")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    security = container["securityContext"]
    env = {e["name"]: e["value"] for e in container["env"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}

    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["automountServiceAccountToken"] is False
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert "nvidia.com/gpu" not in container["resources"].get("limits", {})
    assert "nvidia.com/gpu" not in container["resources"].get("requests", {})
    assert {"cpu", "memory"} <= container["resources"]["requests"].keys()
    assert {"cpu", "memory"} <= container["resources"]["limits"].keys()
    assert security["runAsNonRoot"] is True
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert not security.get("privileged")
    assert mounts["proc"]["readOnly"] is True and volumes["proc"]["hostPath"]["path"] == "/proc"
    assert mounts["sys"]["readOnly"] is True and volumes["sys"]["hostPath"]["path"] == "/sys"
    assert "--procfs=" + mounts["proc"]["mountPath"] in container["args"]
    assert "--sysfs=" + mounts["sys"]["mountPath"] in container["args"]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9842, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


def test_ingest_socket_directory_is_shared_and_handed_to_trainmon(base: list[dict[str, Any]]) -> None:
    """The socket lives on a hostPath that training pods mount; a minimal root init container owns it to trainmon."""
    pod = one(base, "DaemonSet")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    [init] = pod["initContainers"]
    volume = next(v for v in pod["volumes"] if v["name"] == "ingest")
    mount = next(m for m in container["volumeMounts"] if m["name"] == "ingest")
    example = yaml.safe_load(EXAMPLE_POD.read_text())["spec"]

    assert volume["hostPath"] == {"path": "/run/trainmon", "type": "DirectoryOrCreate"}
    assert f"--ingest-socket={mount['mountPath']}/ingest.sock" in container["args"]
    assert f"{volume['hostPath']['path']}/ingest.sock" == DEFAULT_SOCKET  # the hook's default, on the node
    assert {"name": "TRAINMON_INGEST_SOCKET", "value": DEFAULT_SOCKET} in example["containers"][0]["env"]
    assert pod["securityContext"]["runAsGroup"] == SOCKET_GID
    assert init["command"] == ["install", "-d", "-o", str(pod["securityContext"]["runAsUser"]),
                               "-g", str(SOCKET_GID), "-m", "0770", mount["mountPath"], "/var/lib/trainmon"]
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]}
    assert init["securityContext"]["allowPrivilegeEscalation"] is False
    assert init["securityContext"]["readOnlyRootFilesystem"] is True
    assert example["volumes"][0]["hostPath"]["path"] == volume["hostPath"]["path"]
    assert SOCKET_GID in example["securityContext"]["supplementalGroups"]


def test_init_container_command_owns_a_root_owned_directory(base: list[dict[str, Any]], tmp_path: Path) -> None:
    """Run the init container's command as root holding only its two capabilities, on a root-owned 0755 dir."""
    require(os.geteuid() == 0, "needs root to run the init container's command with its capabilities")
    setpriv = require_tool("setpriv")
    [init] = one(base, "DaemonSet")["spec"]["template"]["spec"]["initContainers"]
    caps = ",".join(f"+{c.lower()}" for c in init["securityContext"]["capabilities"]["add"])
    target = tmp_path / "run-trainmon"
    target.mkdir(mode=0o755)
    os.chown(target, 0, 0)
    command = [*init["command"][:-2], str(target)]

    result = subprocess.run([setpriv, f"--inh-caps=-all,{caps}", f"--bounding-set=-all,{caps}", "--", *command],
                            capture_output=True, text=True, timeout=30)

    assert result.returncode == 0, result.stderr
    stat = target.stat()
    assert (stat.st_uid, stat.st_gid, stat.st_mode & 0o7777) == (10001, SOCKET_GID, 0o770)


def test_health_history_is_on_the_node_and_the_kernel_log_is_not_mounted(base: list[dict[str, Any]]) -> None:
    """--state-dir is a hostPath (the history outlives the pod, so a reboot is seen), made trainmon's by the
    init container; /dev/kmsg is not mounted: an unprivileged container cannot open it (device cgroup) and a
    non-root one gets no effective SYSLOG capability (docs/security.md), so XIDs come from NVML events."""
    pod = one(base, "DaemonSet")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    [init] = pod["initContainers"]
    volume = next(v for v in pod["volumes"] if v["name"] == "state")
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}

    assert volume["hostPath"] == {"path": "/var/lib/trainmon", "type": "DirectoryOrCreate"}
    assert f"--state-dir={mounts['state']}" in container["args"]
    assert mounts["state"] in init["command"]
    assert {"name": "state", "mountPath": mounts["state"]} in init["volumeMounts"]
    assert not [v for v in pod["volumes"] if "kmsg" in v.get("hostPath", {}).get("path", "")]


def test_service_is_headless_and_monitor_scrapes_its_port(base: list[dict[str, Any]]) -> None:
    """Headless Service on 9842; the ServiceMonitor selects it, so the job label is `trainmon`."""
    service = one(base, "Service")
    monitor = one(base, "ServiceMonitor")
    pod_labels = one(base, "DaemonSet")["spec"]["template"]["metadata"]["labels"]

    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["ports"][0]["port"] == 9842
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert service["metadata"]["name"] == "trainmon"


def test_dashboards_are_labelled_for_the_grafana_sidecar(base: list[dict[str, Any]]) -> None:
    """Each dashboard ConfigMap carries grafana_dashboard: "1" and the JSON byte for byte."""
    for config_map in (o for o in base if o["kind"] == "ConfigMap"):
        [(name, text)] = config_map["data"].items()
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert text == (REPO / "grafana" / "dashboards" / name).read_text()


def test_prometheusrule_holds_exactly_the_rule_files(base: list[dict[str, Any]]) -> None:
    """spec.groups is rules.yml's groups, then alerts.yml's, unchanged."""
    expected = [g for name in ("rules.yml", "alerts.yml")
                for g in yaml.safe_load((REPO / "prometheus" / name).read_text())["groups"]]

    assert one(base, "PrometheusRule")["spec"]["groups"] == expected


def test_generator_detects_a_stale_copy(tmp_path: Path) -> None:
    """A hand edit of the committed PrometheusRule is reported, so the equality test can fail."""
    generator = load_generator()
    shutil.copytree(KUBERNETES / "base", tmp_path / "base")
    rule = tmp_path / "base" / "prometheusrule.yaml"
    rule.write_text(rule.read_text().replace("for: 5m", "for: 6m", 1))

    assert generator.stale(tmp_path / "base") == ["prometheusrule.yaml"]


def test_overlay_labels_monitor_and_rules_for_the_release(overlay: list[dict[str, Any]]) -> None:
    """kube-prometheus-stack selects only objects labelled with its release."""
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert one(overlay, kind)["metadata"]["labels"]["release"] == "kube-prometheus-stack"


@pytest.fixture(scope="module")
def pod_resources() -> list[dict[str, Any]]:
    return kustomize(POD_RESOURCES)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_pod_resources_overlay_validates(pod_resources: list[dict[str, Any]], version: str) -> None:
    for obj in (o for o in pod_resources if o["kind"] not in CRD_FILES):
        kubernetes_validate.validate(obj, version, strict=True)
    for kind in sorted(CRD_FILES):
        validate_custom(one(pod_resources, kind), crd_schema(kind))


def test_pod_resources_overlay_mounts_the_kubelet_directory_and_only_adds_root(
        base: list[dict[str, Any]], pod_resources: list[dict[str, Any]]) -> None:
    """The directory (kubelet remakes the socket), read-only, the flag pointing into it; root, nothing more."""
    pod = one(pod_resources, "DaemonSet")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "pod-resources")
    volume = next(v for v in pod["volumes"] if v["name"] == "pod-resources")
    security = container["securityContext"]
    base_pod = one(base, "DaemonSet")["spec"]["template"]["spec"]

    assert volume["hostPath"] == {"path": KUBELET_DIR, "type": "Directory"}
    assert mount == {"name": "pod-resources", "mountPath": KUBELET_DIR, "readOnly": True}
    assert f"--kubelet-pod-resources-socket={KUBELET_DIR}/kubelet.sock" in container["args"]
    assert (security["runAsUser"], security["runAsNonRoot"]) == (0, False)
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["allowPrivilegeEscalation"] is False and security["readOnlyRootFilesystem"] is True
    assert not security.get("privileged")
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    without = {**security}
    del without["runAsUser"]
    assert {**without, "runAsNonRoot": True} == base_pod["containers"][0]["securityContext"]
    assert not any("pod-resources" in str(v) for v in base_pod["volumes"]), "the base stays unprivileged"


def test_example_training_pod_passes_its_pod_to_the_hook() -> None:
    """The downward API sets POD_NAME and POD_NAMESPACE, which the hook reads (trainmon.hook.identity)."""
    [container] = yaml.safe_load(EXAMPLE_POD.read_text())["spec"]["containers"]
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in container["env"]}

    assert ("metadata.name", "metadata.namespace") == (env["POD_NAME"], env["POD_NAMESPACE"])


def test_base_image_is_a_placeholder_an_overlay_replaces(base: list[dict[str, Any]], tmp_path: Path) -> None:
    """No image is published: the base names one that cannot resolve, and the overlay docs/deploy.md shows
    (rendered from the page itself) sets the real one on every container."""
    images = {c["image"] for c in one(base, "DaemonSet")["spec"]["template"]["spec"]["containers"]}
    docs = (REPO / "docs" / "deploy.md").read_text()
    [overlay_text] = [block for block in re.findall(r"```yaml\n(.*?)```", docs, re.S)
                      if block.startswith("resources: [../deploy/kubernetes]")]
    overlay_dir = tmp_path / "my-trainmon"
    overlay_dir.mkdir()
    (overlay_dir / "kustomization.yaml").write_text(
        overlay_text.replace("../deploy/kubernetes", os.path.relpath(KUBERNETES, overlay_dir)))

    rendered = one(kustomize(overlay_dir), "DaemonSet")["spec"]["template"]["spec"]

    assert {f"registry.invalid/trainmon:{__version__}"} == images
    assert {f"registry.example.com/ml/trainmon:{__version__}"} == {
        c["image"] for c in rendered["containers"] + rendered["initContainers"]}
    edit = f"kustomize edit set image registry.invalid/trainmon=registry.example.com/ml/trainmon:{__version__}"
    assert edit in docs
