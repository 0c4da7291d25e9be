"""infra/: the compose stack, its auth overlay, the Kubernetes job template (the Dockerfile:
test_dockerfile.py).

No Docker engine or cluster runs here, so these check what can be checked without one: the
compose model through `docker compose config` where the compose plugin exists, and always the
rules the stack promises (loopback ports, health-gated start-up, secrets only from the
environment); the job template through Prefect's own validation and templating.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml
from prefect.server.schemas.actions import validate_base_job_template
from prefect.utilities.templating import apply_values, find_placeholders
from prefect.workers.base import BaseVariables

from tests.fakes import REPO

INFRA = REPO / "infra"
SECRET_NAME = re.compile(r"PASSWORD|SECRET|AUTH_STRING|ACCESS_KEY|_KEY$")
REQUIRED_VAR = re.compile(r"^\$\{[A-Z_]+:\?[^}]+\}$")
DUMMY_ENV = {
    "POSTGRES_PASSWORD": "pw",
    "MINIO_ROOT_USER": "u",
    "MINIO_ROOT_PASSWORD": "pw",
    "PREFECT_AUTH_STRING": "a:b",
    "MLFLOW_ADMIN_PASSWORD": "pw",
    "MLFLOW_FLASK_SERVER_SECRET_KEY": "k",
    "MLFLOW_TRACKING_PASSWORD": "pw",
}


def load(name: str) -> dict[str, Any]:
    loaded = yaml.safe_load((INFRA / name).read_text())
    assert isinstance(loaded, dict)
    return loaded


@pytest.fixture(scope="module")
def stack() -> dict[str, Any]:
    return load("docker-compose.yml")


@pytest.fixture(scope="module")
def auth() -> dict[str, Any]:
    return load("docker-compose.auth.yml")


def compose_plugin() -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    return subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0


def docker_compose_config(*files: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    args = [arg for name in files for arg in ("-f", str(INFRA / name))]
    return subprocess.run(
        ["docker", "compose", *args, "config", "--quiet"],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **env},
        cwd=REPO,
    )


@pytest.mark.skipif(not compose_plugin(), reason="the docker compose plugin is not installed")
def test_docker_compose_config_accepts_the_stack_and_demands_its_secrets() -> None:
    assert docker_compose_config("docker-compose.yml", env=DUMMY_ENV).returncode == 0
    overlay = docker_compose_config("docker-compose.yml", "docker-compose.auth.yml", env=DUMMY_ENV)
    assert overlay.returncode == 0, overlay.stderr
    missing = docker_compose_config("docker-compose.yml", env={})
    assert missing.returncode != 0 and "POSTGRES_PASSWORD" in missing.stderr


def test_every_published_port_binds_loopback_by_default(stack: dict[str, Any]) -> None:
    published = []
    for name, service in stack["services"].items():
        for port in service.get("ports", []):
            assert isinstance(port, str), f"{name}: use the short form with an address"
            address = port.rsplit(":", 2)[0]
            assert address == "${BIND_ADDRESS:-127.0.0.1}", f"{name} publishes {port}"
            published.append(port.rsplit(":", 2)[1])
    assert sorted(published) == ["4200", "5000", "9001"]
    assert "BIND_ADDRESS=127.0.0.1" in (INFRA / ".env.example").read_text().splitlines()


def test_every_service_is_health_checked_or_a_one_shot_gated_on_healthy_ones(
    stack: dict[str, Any],
) -> None:
    services = stack["services"]
    one_shots = {name for name, s in services.items() if s.get("restart") == "no"}
    assert one_shots == {"minio-init", "register"}
    for name, service in services.items():
        if name not in one_shots:
            assert service["healthcheck"]["test"], f"{name} has no healthcheck"
        for upstream, rule in service.get("depends_on", {}).items():
            expected = (
                "service_completed_successfully" if upstream in one_shots else "service_healthy"
            )
            assert rule == {"condition": expected}, f"{name} -> {upstream}: {rule}"
        if name in one_shots:
            assert service["depends_on"], f"one-shot {name} must wait for a healthy service"
        if service.get("command", [])[:3] == ["prefect", "worker", "start"]:
            assert "--with-healthcheck" in service["command"], f"{name} serves no /health"


def environment_values(document: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (name, key, str(value))
        for name, service in document["services"].items()
        for key, value in (service.get("environment") or {}).items()
    ]


def test_secrets_come_only_from_required_environment_variables(
    stack: dict[str, Any], auth: dict[str, Any]
) -> None:
    checked = 0
    for name, key, value in environment_values(stack) + environment_values(auth):
        if SECRET_NAME.search(key) and key != "MLFLOW_TRACKING_USERNAME":
            assert REQUIRED_VAR.match(value), f"{name}.{key}={value!r} is not ${{VAR:?...}}"
            checked += 1
        for user_info in re.findall(r"://([^@/]+)@", value):  # credentials inside a URI
            assert REQUIRED_VAR.match(user_info.split(":", 1)[1]), f"{name}.{key}"
            checked += 1
    assert checked >= 12
    example = dict(
        line.split("=", 1)
        for line in (INFRA / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert {k for k, v in example.items() if "CHANGE_ME" in v} >= {
        key for key in DUMMY_ENV if key != "MINIO_ROOT_USER"
    }
    # A filled-in infra/.env never reaches git.
    ignored = subprocess.run(["git", "check-ignore", "-q", "infra/.env"], cwd=REPO)
    assert ignored.returncode == 0


def test_named_volumes_are_declared_and_bind_mounts_stay_inside_infra(
    stack: dict[str, Any], auth: dict[str, Any]
) -> None:
    for document in (stack, auth):
        declared = set(document.get("volumes") or {})
        for name, service in document["services"].items():
            for volume in service.get("volumes", []):
                source = volume.split(":", 1)[0]
                if source.startswith("./"):
                    assert (INFRA / source).is_file(), f"{name} mounts missing {source}"
                else:
                    assert source in declared, f"{name} uses undeclared volume {source}"
    assert {"postgres-data", "minio-data", "cloze-data"} <= set(stack["volumes"])


def test_auth_overlay_turns_on_both_servers_auth_and_gives_clients_credentials(
    stack: dict[str, Any], auth: dict[str, Any]
) -> None:
    services = auth["services"]
    prefect_auth = services["prefect-server"]["environment"]["PREFECT_SERVER_API_AUTH_STRING"]
    for client in ("worker", "register", "worker-gpu"):
        environment = services[client]["environment"]
        assert environment["PREFECT_API_AUTH_STRING"] == prefect_auth
        assert {"MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"} <= set(environment)
    mlflow = services["mlflow"]
    assert mlflow["command"] == [
        *stack["services"]["mlflow"]["command"],
        "--app-name",
        "basic-auth",
    ]
    ini_path = mlflow["environment"]["MLFLOW_AUTH_CONFIG_PATH"]
    assert f"./mlflow/basic_auth.ini:{ini_path}:ro" in mlflow["volumes"]
    ini = configparser.ConfigParser()
    ini.read(INFRA / "mlflow" / "basic_auth.ini")
    assert ini["mlflow"]["default_permission"] == "READ"
    assert "admin_password" not in ini["mlflow"]  # from MLFLOW_AUTH_ADMIN_PASSWORD instead
    # The auth app's store lives on the volume the image prepares for the unprivileged user.
    assert ini["mlflow"]["database_uri"].startswith("sqlite:////var/lib/mlflow-auth/")
    assert "mlflow-auth:/var/lib/mlflow-auth" in mlflow["volumes"]


def test_compose_builds_the_cpu_image_and_the_gpu_worker_the_cuda_one(
    stack: dict[str, Any],
) -> None:
    services = stack["services"]
    assert services["worker"]["build"]["args"]["TORCH_VARIANT"] == "cpu"
    gpu = services["worker-gpu"]
    assert gpu["profiles"] == ["gpu"]
    assert gpu["build"]["args"]["TORCH_VARIANT"].startswith("${TORCH_CUDA_VARIANT:-cu12")
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["capabilities"] == ["gpu"]


@pytest.fixture(scope="module")
def job_template() -> dict[str, Any]:
    loaded = json.loads((INFRA / "k8s" / "base-job-template.json").read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_job_template_passes_prefects_validation_and_declares_the_base_variables(
    job_template: dict[str, Any],
) -> None:
    validate_base_job_template(job_template)  # what the server runs on `work-pool create`
    properties = job_template["variables"]["properties"]
    assert set(BaseVariables.model_json_schema()["properties"]) <= set(properties)
    used = {p.name for p in find_placeholders(json.dumps(job_template["job_configuration"]))}
    assert used == set(properties) - {"cluster_config"}  # every variable reaches the job


def test_job_template_renders_a_gpu_job_the_kubernetes_worker_accepts(
    job_template: dict[str, Any],
) -> None:
    defaults = {
        name: schema["default"]
        for name, schema in job_template["variables"]["properties"].items()
        if "default" in schema
    }
    values = {**defaults, "name": "nightly", "env": {"A": "1"}, "labels": {}, "gpu_count": 4}
    rendered = apply_values(job_template["job_configuration"], {**values, "command": "run"})
    manifest = rendered["job_manifest"]
    pod = manifest["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert container["image"] == "cloze:cuda" and container["env"] == {"A": "1"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in (
        pod["tolerations"]
    )
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory"
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    # The fixed values prefect-kubernetes checks in every job manifest.
    assert (manifest["apiVersion"], manifest["kind"]) == ("batch/v1", "Job")
    assert container["name"] == "prefect-job"
    assert (pod["restartPolicy"], pod["parallelism"], pod["completions"]) == ("Never", 1, 1)
    assert manifest["metadata"]["generateName"] == "nightly-"
    # Credentials reach the pod from a Secret, never through the template or the pool.
    assert container["envFrom"] == [{"secretRef": {"name": "cloze-env", "optional": True}}]
