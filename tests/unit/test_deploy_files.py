"""deploy/ validated without Docker or a cluster: the Kubernetes manifests against the API
schemas of a pinned Kubernetes version (kubernetes-validate, strict), the compose files against
the Compose specification (the compose-spec package's parser, after the interpolation Docker
Compose does), the Dockerfile with hadolint and for what it must hold, every environment
variable they set against the names the settings read, and every command they run against
the `bidder` command's parser."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from compose_spec import PyCompose

from bidder.cli import build_parser
from bidder.observability import MULTIPROCESS_DIR_ENV
from bidder.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S_VERSION = "1.33.0"  # the oldest Kubernetes release the manifests promise to fit
COMPOSE_FILES = [DEPLOY / "compose.yaml", DEPLOY / "compose.scale.yaml"]
MANIFESTS = sorted((DEPLOY / "k8s").glob("*.yaml"))
#: What an operator puts in deploy/.env for the compose files.
COMPOSE_ENV = {
    "POSTGRES_PASSWORD": "compose-test-password",
    "ADMIN_TOKEN": "compose-test-admin-token-0123",
    "SIGNING_SECRETS": "compose-test-signing-secret-0123",
    "GRAFANA_ADMIN_PASSWORD": "compose-test-grafana",
}


class _Recording(dict[str, str]):
    """An environment that notes every name read from it."""

    def __init__(self, values: Mapping[str, str]) -> None:
        super().__init__(values)
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.read.add(key)
        return super().__contains__(key)


def known_settings() -> set[str]:
    """Every environment variable the service reads: what load_settings asks its environment
    for, and the metrics folder the observability module reads."""
    env = _Recording(
        {
            "DATABASE_URL": "postgresql://u:p@db:5432/d",
            "REDIS_URL": "redis://r:6379/0",
            "ADMIN_TOKEN": "a" * 20,
            "SIGNING_SECRETS": "s" * 20,
        }
    )
    load_settings(env)
    return env.read | {MULTIPROCESS_DIR_ENV}


# -- Kubernetes ----------------------------------------------------------------------------


def manifests() -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in manifests() if doc["kind"] == kind]


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]
    template = spec["template"] if "template" in spec else spec["jobTemplate"]["spec"]["template"]
    found: list[dict[str, Any]] = template["spec"]["containers"]
    return found


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_manifest_is_valid_for_the_pinned_kubernetes(path: Path) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_validator_refuses_a_misspelled_field() -> None:
    """The check above can fail: strict validation refuses a field the API does not have."""
    web = json.loads(json.dumps(by_kind("Deployment")[0]))
    web["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(web, K8S_VERSION, strict=True)


def test_the_manifests_hold_every_piece_of_a_deployment() -> None:
    kinds = sorted(doc["kind"] for doc in manifests())
    for kind in (
        "ConfigMap",
        "Deployment",
        "HorizontalPodAutoscaler",
        "Job",
        "PodDisruptionBudget",
        "Secret",
        "Service",
    ):
        assert kind in kinds, kind
    components = {
        doc["metadata"]["labels"]["app.kubernetes.io/component"]: doc
        for doc in by_kind("Deployment")
    }
    assert set(components) == {"web", "writer"}
    web = containers(components["web"])[0]
    assert web["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert web["livenessProbe"]["httpGet"]["path"] == "/healthz"
    hpa = by_kind("HorizontalPodAutoscaler")[0]
    assert hpa["spec"]["scaleTargetRef"]["name"] == components["web"]["metadata"]["name"]
    config = by_kind("ConfigMap")[0]["data"]
    assert config["RECORD_WRITER"] == "0"  # the writer Deployment drains the queue
    assert containers(by_kind("Job")[0])[0]["args"] == ["migrate"]


def test_every_pod_has_resources_runs_unprivileged_and_takes_secrets_from_a_secret() -> None:
    secret_keys = set(by_kind("Secret")[0]["stringData"])
    assert {"ADMIN_TOKEN", "SIGNING_SECRETS", "DATABASE_URL", "REDIS_URL"} <= secret_keys
    for doc in by_kind("Deployment") + by_kind("Job"):
        pod = doc["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for container in pod["containers"]:
            for side in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(container["resources"][side]), doc["metadata"]
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert {"secretRef": {"name": "bidder-secrets"}} in container["envFrom"]
            # No secret is written into a manifest as a plain variable.
            assert not {e["name"] for e in container.get("env", [])} & secret_keys


# -- Compose -------------------------------------------------------------------------------

_VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_]\w*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """Docker Compose's interpolation of `${NAME}`, `${NAME:-default}`, `${NAME:?error}`."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        given = env.get(match["name"], "")
        if match["op"] in (":-", "-"):
            return given or match["arg"]
        if match["op"] in (":?", "?") and not given:
            raise KeyError(f"{match['name']}: {match['arg']}")
        return given

    return _VARIABLE.sub(one, value)


def compose(path: Path, env: Mapping[str, str] = COMPOSE_ENV) -> dict[str, Any]:
    """The file as `docker compose config` sees it: YAML (merge keys resolved), interpolated,
    then parsed by the Compose specification's model, which refuses what the spec does not
    allow (unknown keys, wrong types, unknown conditions)."""
    data = interpolate(yaml.safe_load(path.read_text()), env)
    parsed: dict[str, Any] = PyCompose.from_json(json.dumps(data)).to_dict()
    return parsed


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_every_compose_file_follows_the_compose_specification(path: Path) -> None:
    services = compose(path)["services"]
    for name, service in services.items():
        for mount in service.get("volumes", []):
            source = mount.split(":")[0] if isinstance(mount, str) else mount.get("source", "")
            if source.startswith("."):  # a file or folder of the repository
                assert (path.parent / source).exists(), f"{name}: {source}"


def test_the_compose_check_can_fail() -> None:
    broken = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    broken["services"]["web"]["restart_policy"] = "always"  # not a service key
    with pytest.raises(ValueError, match="restart_policy"):
        PyCompose.from_json(json.dumps(interpolate(broken, COMPOSE_ENV)))
    with pytest.raises(KeyError, match="ADMIN_TOKEN"):  # a required secret left unset
        compose(
            DEPLOY / "compose.yaml", {k: v for k, v in COMPOSE_ENV.items() if k != "ADMIN_TOKEN"}
        )


def test_one_machine_runs_web_writer_migration_and_monitoring() -> None:
    services = compose(DEPLOY / "compose.yaml")["services"]
    assert {"web", "writer", "migrate", "postgres", "redis", "prometheus", "grafana"} <= set(
        services
    )
    web = services["web"]
    assert web["environment"]["RECORD_WRITER"] == "0"
    assert web["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["migrate"]["command"] == ["migrate"]
    assert services["writer"]["command"][0] == "writer"
    mounted = " ".join(str(m) for m in services["grafana"]["volumes"])
    assert "grafana/dashboards" in mounted
    assert "grafana/provisioning" in mounted


def test_scale_out_puts_several_web_instances_behind_a_load_balancer() -> None:
    services = compose(DEPLOY / "compose.scale.yaml")["services"]
    assert services["web"]["deploy"]["replicas"] > 1
    assert "ports" not in services["web"]  # reached through the balancer only
    conf = (DEPLOY / "nginx" / "nginx.conf").read_text()
    assert "server web:8000" in conf
    assert any("nginx.conf" in str(m) for m in services["lb"]["volumes"])


# -- what the images run -------------------------------------------------------------------


def bidder_services() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in COMPOSE_FILES:
        for name, service in compose(path)["services"].items():
            if str(service.get("image", "")).startswith("bidder:"):
                yield f"{path.name}:{name}", service


def test_every_variable_the_deployments_set_is_a_setting() -> None:
    known = known_settings()
    assert {"DATABASE_URL", "REDIS_URL", "RECORD_WRITER", "LOG_LEVEL"} <= known
    set_by: dict[str, set[str]] = {}
    for where, service in bidder_services():
        set_by[where] = set(service.get("environment") or {})
    for doc in by_kind("ConfigMap"):
        set_by[f"ConfigMap {doc['metadata']['name']}"] = set(doc["data"])
    for doc in by_kind("Secret"):
        set_by[f"Secret {doc['metadata']['name']}"] = set(doc["stringData"])
    for doc in by_kind("Deployment") + by_kind("Job"):
        for container in containers(doc):
            set_by[doc["metadata"]["name"]] = {e["name"] for e in container.get("env", [])}
    assert len(set_by) >= 8
    for where, names in set_by.items():
        assert names <= known, f"{where} sets what the settings never read: {names - known}"


def test_the_readme_table_lists_every_setting() -> None:
    readme = (ROOT / "README.md").read_text()
    table = set(re.findall(r"^\| `([A-Z][A-Z0-9_]+)` \|", readme, re.MULTILINE))
    assert known_settings() <= table


def commands_run() -> list[tuple[str, list[str]]]:
    found = [(where, list(service["command"])) for where, service in bidder_services()]
    for doc in by_kind("Deployment") + by_kind("Job"):
        found += [(doc["metadata"]["name"], list(c["args"])) for c in containers(doc)]
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    cmd = re.search(r"^CMD (\[.*\])$", dockerfile, re.MULTILINE)
    assert cmd is not None
    found.append(("Dockerfile CMD", json.loads(cmd.group(1))))
    return found


def test_every_command_the_deployments_run_is_a_bidder_command() -> None:
    parser = build_parser()
    found = commands_run()
    assert {args[0] for _, args in found} == {"serve", "writer", "migrate"}
    for where, args in found:
        parsed = parser.parse_args(args)  # exits (SystemExit) on an unknown command or option
        assert callable(parsed.func), where


# -- Dockerfile ----------------------------------------------------------------------------


def instructions() -> list[tuple[str, str]]:
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def test_the_dockerfile_passes_hadolint() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    result = subprocess.run(
        [str(hadolint), "--failure-threshold", "info", str(DEPLOY / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_is_multi_stage_locked_non_root_and_health_checked() -> None:
    steps = instructions()
    stages = [args for op, args in steps if op == "FROM"]
    assert len(stages) >= 2
    assert all("slim" in stage for stage in stages)
    runs = " ".join(args for op, args in steps if op == "RUN")
    assert "uv sync --frozen --no-dev" in runs  # exactly the versions of uv.lock
    assert any(op == "COPY" and "uv.lock" in args for op, args in steps)
    users = [args for op, args in steps if op == "USER"]
    assert users
    assert users[-1].split(":")[0] not in ("root", "0")
    health = [args for op, args in steps if op == "HEALTHCHECK"]
    assert len(health) == 1
    assert "/healthz" in health[0]
    entrypoint = json.loads(next(args for op, args in steps if op == "ENTRYPOINT"))
    assert entrypoint[0].endswith("tini")
    assert entrypoint[-1] == "bidder"
    assert shlex.split(next(args for op, args in steps if op == "STOPSIGNAL")) == ["SIGTERM"]
