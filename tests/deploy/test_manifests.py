"""The Kubernetes example (deploy/kubernetes) is valid for the Kubernetes versions it claims,
and says what the README says: a native sidecar on a unix socket in an emptyDir, exec probes
on the health service, resources, the token from a Secret, the settings from a ConfigMap. The
last test starts the sidecar as the manifest does and runs its probes' commands."""

from __future__ import annotations

import re
import shlex
import tempfile
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cleveragents.sidecar import SidecarConfig
from cleveragents.sidecar.config import load_config

from .conftest import KUBERNETES, run_cli, served, without_sidecar_settings

#: Native sidecar containers (init containers with restartPolicy: Always) are on by default
#: from Kubernetes 1.29; the newest is the newest schema kubernetes-validate ships.
VERSIONS = ("1.29.0", kubernetes_validate.latest_version())


def resources() -> list[dict[str, Any]]:
    """Every resource the kustomization applies."""
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    found = []
    for name in kustomization["resources"]:
        found += [r for r in yaml.safe_load_all((KUBERNETES / name).read_text()) if r]
    return found


def the(kind: str) -> dict[str, Any]:
    [resource] = [r for r in resources() if r["kind"] == kind]
    return resource


def pod() -> dict[str, Any]:
    spec: dict[str, Any] = the("Deployment")["spec"]["template"]["spec"]
    return spec


def sidecar() -> dict[str, Any]:
    [container] = [c for c in pod()["initContainers"] if c["name"] == "cleveragents-sidecar"]
    found: dict[str, Any] = container
    return found


def app() -> dict[str, Any]:
    [container] = pod()["containers"]
    found: dict[str, Any] = container
    return found


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def volume(name: str) -> dict[str, Any]:
    [found] = [v for v in pod()["volumes"] if v["name"] == name]
    typed: dict[str, Any] = found
    return typed


def mount_of(container: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """The mount ``path`` lies in, and where inside it."""
    for mount in container["volumeMounts"]:
        base = PurePosixPath(mount["mountPath"])
        if PurePosixPath(path).is_relative_to(base):
            return mount, str(PurePosixPath(path).relative_to(base))
    raise AssertionError(f"{path} is in no volume of {container['name']}")


def sidecar_toml() -> str:
    text: str = the("ConfigMap")["data"]["sidecar.toml"]
    return text


def test_every_manifest_file_is_applied_by_the_kustomization() -> None:
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    files = {p.name for p in KUBERNETES.glob("*.yaml")} - {"kustomization.yaml"}

    assert set(kustomization["resources"]) == files


@pytest.mark.parametrize("version", VERSIONS)
def test_the_manifests_validate_against_the_kubernetes_schemas(version: str) -> None:
    for resource in resources():
        kubernetes_validate.validate(resource, version, strict=True)


def test_a_misspelt_field_fails_the_validation() -> None:
    deployment = the("Deployment")
    deployment["spec"]["template"]["spec"]["initContainers"][0]["restartPolicyy"] = "Always"

    with pytest.raises(kubernetes_validate.ValidationError, match="restartPolicyy"):
        kubernetes_validate.validate(deployment, VERSIONS[0], strict=True)


def test_the_sidecar_is_a_native_sidecar_next_to_the_app() -> None:
    assert sidecar()["restartPolicy"] == "Always"  # the schema accepts any string here
    assert sidecar()["args"] == ["serve"]
    assert "startupProbe" in sidecar()  # the app starts once the sidecar serves
    assert app()["name"] == "app"


def test_app_and_sidecar_share_a_unix_socket_in_an_emptydir_as_one_uid() -> None:
    listen = env_of(sidecar())["CLEVERAGENTS_SIDECAR_LISTEN"]
    socket = listen.removeprefix("unix:")
    sidecar_mount, name = mount_of(sidecar(), socket)
    app_mount, app_name = mount_of(app(), socket)

    assert listen.startswith("unix:/")
    assert env_of(app())["CLEVERAGENTS_SIDECAR_TARGET"] == listen
    assert sidecar_mount["name"] == app_mount["name"]
    assert (name, app_name) == ("sidecar.sock", "sidecar.sock")
    assert "emptyDir" in volume(sidecar_mount["name"])
    # The socket is mode 0600: the pod's one uid for both, and neither overrides it.
    assert pod()["securityContext"]["runAsUser"] != 0
    assert pod()["securityContext"]["runAsNonRoot"] is True
    for container in (sidecar(), app()):
        assert "runAsUser" not in container.get("securityContext", {})


def test_the_probes_are_the_health_command_on_that_socket() -> None:
    probes = {kind: sidecar()[kind]["exec"]["command"] for kind in ("startupProbe",
              "readinessProbe", "livenessProbe")}  # fmt: skip

    for kind, command in probes.items():
        assert command[:2] == ["cleveragents-sidecar", "health"], kind
        assert "--target" not in command  # the listen address, from the same variable
        timeout = float(command[command.index("--timeout") + 1])
        assert sidecar()[kind]["timeoutSeconds"] > timeout, kind
    assert "--live" in probes["livenessProbe"]
    assert "--live" not in probes["readinessProbe"]
    assert "--live" not in probes["startupProbe"]


def test_the_sidecar_has_resource_requests_and_a_memory_limit() -> None:
    for container in (sidecar(), app()):
        assert set(container["resources"]["requests"]) == {"cpu", "memory"}
        assert "memory" in container["resources"]["limits"]


def test_every_volume_the_sidecar_writes_is_bounded_in_size() -> None:
    # An emptyDir without sizeLimit can fill the node's disk (or, memory-backed, its memory).
    written = [m["name"] for m in sidecar()["volumeMounts"] if not m.get("readOnly")]
    empty_dirs = {name: volume(name)["emptyDir"] for name in written if "emptyDir" in volume(name)}

    assert {"sidecar-state", "sandboxes", "sidecar-socket", "tmp"} <= set(empty_dirs)
    for name, empty_dir in empty_dirs.items():
        assert empty_dir.get("sizeLimit"), name


def test_the_pod_mounts_no_service_account_token() -> None:
    assert pod()["automountServiceAccountToken"] is False


def test_the_token_comes_from_a_secret_that_the_config_names_and_the_app_sends() -> None:
    config = load_config_from_text(sidecar_toml())
    mount, item_path = mount_of(sidecar(), config.auth.token_file)
    secret = volume(mount["name"])["secret"]
    [item] = [i for i in secret["items"] if i["path"] == item_path]
    sent = env_of(app())["CLEVERAGENTS_SIDECAR_TOKEN"]["secretKeyRef"]

    assert mount["readOnly"] is True
    assert sent == {"name": secret["secretName"], "key": item["key"]}


def test_the_configmap_is_the_config_file_the_sidecar_reads() -> None:
    config_path = env_of(sidecar())["CLEVERAGENTS_SIDECAR_CONFIG"]
    mount, file_name = mount_of(sidecar(), config_path)
    config_map = volume(mount["name"])["configMap"]["name"]

    assert config_map == the("ConfigMap")["metadata"]["name"]
    assert file_name in the("ConfigMap")["data"]
    assert "listen" not in load_config_text_keys(sidecar_toml())  # the env var's job
    config = load_config_from_text(sidecar_toml())
    for path in (config.store.url, *(root.rstrip("*") for root in config.sandbox_roots)):
        assert mount_of(sidecar(), path)[0].get("readOnly") is not True, path


def load_config_text_keys(text: str) -> set[str]:
    return set(tomllib.loads(text))


def load_config_from_text(text: str) -> SidecarConfig:
    """The settings the ConfigMap's sidecar.toml makes, as ``serve`` would load them."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "sidecar.toml"
        path.write_text(text)
        return load_config(str(path), env={})


def the_container_below(base: Path) -> dict[str, str]:
    """Lay out the sidecar container's volumes below ``base`` (each mount path moved there):
    the ConfigMap's file and the Secret's token; the container's environment, moved too."""
    moved = {m["mountPath"]: str(base / m["name"]) for m in sidecar()["volumeMounts"]}
    longest_first = sorted(moved, key=len, reverse=True)
    mount_paths = re.compile("|".join(map(re.escape, longest_first)) + r"(?=/|\"|$)", re.M)

    def here(text: str) -> str:
        return mount_paths.sub(lambda match: moved[match.group()], text)

    for local in moved.values():
        Path(local).mkdir()
    env = {k: here(v) for k, v in env_of(sidecar()).items() if isinstance(v, str)}
    Path(env["CLEVERAGENTS_SIDECAR_CONFIG"]).write_text(here(sidecar_toml()))
    config = load_config(env["CLEVERAGENTS_SIDECAR_CONFIG"], env={})
    Path(config.auth.token_file).write_text("a-token-from-the-secret\n")
    return without_sidecar_settings({**env, "OPENAI_API_KEY": "unused-by-the-probes"})


async def test_the_probe_commands_pass_against_the_sidecar_the_manifest_starts(
    tmp_path: Path,
) -> None:
    """The manifest's container (its env, args, ConfigMap, Secret and volumes) with its
    volumes below ``tmp_path``; then each probe's command, with the container's env."""
    env = the_container_below(tmp_path)

    async with served(sidecar()["args"], env):
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            command = sidecar()[kind]["exec"]["command"]
            status, out, err = await run_cli(*command[1:], env=env)
            assert status == 0, f"{kind}: {shlex.join(command)}: {err}"
            assert out.endswith(": SERVING\n"), out
