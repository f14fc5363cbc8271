"""Turn a pod's first container into a command line, a working directory and env.

What a kubelet and a container runtime would do, minus the image: the
``command`` and ``args`` run as they are (there is no image entrypoint to fall
back on), ``env`` and ``envFrom`` resolve as Kubernetes resolves them,
including ``$(VAR)`` references and the downward API's ``fieldRef``.

Everything here is pure except the two lookups of ConfigMaps and Secrets,
which the caller passes in.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

ObjectLookup = Callable[[str, str], "dict[str, Any] | None"]
"""``(namespace, name) -> object or None``: reads a ConfigMap or a Secret."""

POD_IP = "127.0.0.1"

_LABEL_OR_ANNOTATION = re.compile(r"^metadata\.(labels|annotations)\['(.*)'\]$")


class PodSetupError(Exception):
    """The pod cannot start; the pod gets status Failed with this reason and message.

    Attributes:
        reason: A CamelCase reason, as the kubelet uses (e.g. ``CreateContainerConfigError``).
        message: What is wrong, for people.
    """

    def __init__(self, reason: str, message: str) -> None:
        """Describe why a pod cannot start.

        Args:
            reason: CamelCase reason.
            message: Human-readable explanation.
        """
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Launch:
    """What to run for a pod.

    Attributes:
        container: Name of the container that runs (the first one).
        image: Its image, recorded in the status but never pulled.
        argv: ``command + args``, with ``$(VAR)`` expanded.
        env: The container's own environment variables (``envFrom``, then
            ``env``), to lay over the runner's.
        working_dir: The container's ``workingDir``, or None.
        ignored: Names of init and other containers that do not run.
    """

    container: str
    image: str
    argv: list[str]
    env: dict[str, str]
    working_dir: str | None
    ignored: list[str] = field(default_factory=list)


def expand(text: str, variables: Mapping[str, str]) -> str:
    """Expand ``$(VAR)`` references the way Kubernetes does.

    ``$(NAME)`` becomes the value of ``NAME`` when it is defined and stays as
    written when it is not; ``$$`` becomes ``$``; any other ``$`` is kept.

    Args:
        text: A command, argument or env value.
        variables: The variables that may be referenced.

    Returns:
        The expanded text.
    """
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$" or i + 1 >= len(text):
            out.append(char)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            end = text.find(")", i + 2)
            if end < 0:
                out.append(text[i:])
                break
            name = text[i + 2 : end]
            out.append(variables[name] if name in variables else text[i : end + 1])
            i = end + 1
        else:
            out.append(char)
            i += 1
    return "".join(out)


def field_value(pod: Mapping[str, Any], field_path: str) -> str:
    """Resolve a downward-API ``fieldRef`` against a pod.

    Args:
        pod: The pod object.
        field_path: E.g. ``metadata.name`` or ``metadata.annotations['x']``.

    Returns:
        The value; an absent label or annotation gives an empty string.

    Raises:
        PodSetupError: For a field path the downward API does not offer.
    """
    metadata = pod.get("metadata", {})
    spec = pod.get("spec", {})
    simple: dict[str, Any] = {
        "metadata.name": metadata.get("name"),
        "metadata.namespace": metadata.get("namespace"),
        "metadata.uid": metadata.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.podIP": POD_IP,
        "status.podIPs": POD_IP,
        "status.hostIP": POD_IP,
        "status.hostIPs": POD_IP,
    }
    if field_path in simple:
        return str(simple[field_path] or "")
    match = _LABEL_OR_ANNOTATION.match(field_path)
    if match:
        values = metadata.get(match.group(1)) or {}
        return str(values.get(match.group(2), ""))
    raise PodSetupError(
        "CreateContainerConfigError", f"fieldRef {field_path!r} is not supported by podrunner"
    )


def _key_ref(
    kind: str,
    ref: Mapping[str, Any],
    namespace: str,
    lookup: ObjectLookup,
) -> str | None:
    name = ref.get("name", "")
    key = ref.get("key", "")
    optional = bool(ref.get("optional", False))
    obj = lookup(namespace, name)
    if obj is None:
        if optional:
            return None
        raise PodSetupError("CreateContainerConfigError", f'{kind.lower()} "{name}" not found')
    values = _object_data(kind, obj)
    if key not in values:
        if optional:
            return None
        raise PodSetupError(
            "CreateContainerConfigError",
            f"couldn't find key {key} in {kind} {namespace}/{name}",
        )
    return values[key]


def _object_data(kind: str, obj: Mapping[str, Any]) -> dict[str, str]:
    if kind == "Secret":
        return {
            key: base64.b64decode(value).decode("utf-8", "replace")
            for key, value in (obj.get("data") or {}).items()
        }
    return {key: str(value) for key, value in (obj.get("data") or {}).items()}


def container_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    service_env: Mapping[str, str],
    *,
    configmaps: ObjectLookup,
    secrets: ObjectLookup,
) -> dict[str, str]:
    """Resolve a container's ``envFrom`` and ``env`` as the kubelet does.

    ``envFrom`` sources come first, in order, then ``env`` entries, in order;
    a later definition of a name wins. An ``env`` value may reference
    ``$(NAME)`` of any variable defined before it and of ``service_env``.

    Args:
        pod: The pod object.
        container: The container spec.
        service_env: Variables the runner injects (``KUBERNETES_SERVICE_HOST``,
            ...), which references may use and the container may override.
        configmaps: Reads a ConfigMap.
        secrets: Reads a Secret.

    Returns:
        The container's variables (without ``service_env``).

    Raises:
        PodSetupError: When a reference cannot be resolved.
    """
    namespace = pod.get("metadata", {}).get("namespace", "")
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, ref_key, lookup in (
            ("ConfigMap", "configMapRef", configmaps),
            ("Secret", "secretRef", secrets),
        ):
            ref = source.get(ref_key)
            if ref is None:
                continue
            obj = lookup(namespace, ref.get("name", ""))
            if obj is None:
                if ref.get("optional", False):
                    continue
                raise PodSetupError(
                    "CreateContainerConfigError", f'{kind.lower()} "{ref.get("name")}" not found'
                )
            for key, data in _object_data(kind, obj).items():
                env[prefix + key] = data
    for entry in container.get("env") or []:
        name = entry["name"]
        if "valueFrom" not in entry:
            env[name] = expand(str(entry.get("value", "")), {**service_env, **env})
            continue
        source = entry["valueFrom"]
        value: str | None
        if "fieldRef" in source:
            value = field_value(pod, source["fieldRef"].get("fieldPath", ""))
        elif "configMapKeyRef" in source:
            value = _key_ref("ConfigMap", source["configMapKeyRef"], namespace, configmaps)
        elif "secretKeyRef" in source:
            value = _key_ref("Secret", source["secretKeyRef"], namespace, secrets)
        else:
            kinds = ", ".join(sorted(source))
            raise PodSetupError(
                "CreateContainerConfigError",
                f"env {name}: valueFrom {kinds} is not supported by podrunner",
            )
        if value is not None:
            env[name] = value
    return env


def plan_launch(
    pod: Mapping[str, Any],
    service_env: Mapping[str, str],
    *,
    configmaps: ObjectLookup,
    secrets: ObjectLookup,
) -> Launch:
    """Decide what to run for a pod: its first container's command, env and folder.

    Args:
        pod: The pod object.
        service_env: Variables the runner injects; ``$(VAR)`` may use them.
        configmaps: Reads a ConfigMap.
        secrets: Reads a Secret.

    Returns:
        The launch plan.

    Raises:
        PodSetupError: When the pod has no container, the first container has
            no ``command``, or its env cannot be resolved.
    """
    spec = pod.get("spec", {})
    containers = spec.get("containers") or []
    if not containers:
        raise PodSetupError("CreateContainerConfigError", "the pod has no containers")
    container = containers[0]
    name = str(container.get("name", ""))
    if not container.get("command"):
        raise PodSetupError(
            "CreateContainerConfigError",
            f"container {name!r} has no command; podrunner ignores images, so "
            "spec.containers[0].command must say what to run",
        )
    env = container_env(pod, container, service_env, configmaps=configmaps, secrets=secrets)
    variables = {**service_env, **env}
    argv = [
        expand(str(part), variables)
        for part in [*container["command"], *(container.get("args") or [])]
    ]
    ignored = [str(c.get("name")) for c in spec.get("initContainers") or []]
    ignored += [str(c.get("name")) for c in containers[1:]]
    return Launch(
        container=name,
        image=str(container.get("image", "")),
        argv=argv,
        env=env,
        working_dir=container.get("workingDir") or None,
        ignored=ignored,
    )
