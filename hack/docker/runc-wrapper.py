#!/usr/bin/env python3
"""A runc wrapper for machines whose capability bounding set lacks some capabilities.

dockerd asks runc for every capability when a container is privileged (kind's
node containers are); runc fails with "unable to apply caps" when the machine's
own bounding set lacks one. This wrapper removes the missing capabilities from
the OCI spec (config.json for create/run, the process spec for exec), then
execs the real runc with the same arguments. It reads runc-wrapper.json next to
itself: {"runc": "/usr/sbin/runc", "drop": ["CAP_SYS_RESOURCE", ...]}.
hack/docker/ensure.sh writes both files and sets this as dockerd's default
runtime only when the machine lacks a capability.
"""

import json
import os
import sys

_SETS = ("bounding", "effective", "inheritable", "permitted", "ambient")


def _option(args: list[str], *names: str) -> str | None:
    """Return the value of the first option in names (``--x v`` or ``--x=v``), or None."""
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg[len(name) + 1 :]
    return None


def _drop(caps: dict[str, list[str]], drop: set[str]) -> None:
    """Remove the dropped capabilities from every set of an OCI capabilities object."""
    for key in _SETS:
        if isinstance(caps.get(key), list):
            caps[key] = [c for c in caps[key] if c not in drop]


def _rewrite(path: str, drop: set[str], process_only: bool) -> None:
    """Rewrite one OCI JSON file in place without the dropped capabilities."""
    with open(path) as f:
        spec = json.load(f)
    process = spec if process_only else spec.get("process", {})
    caps = process.get("capabilities")
    if isinstance(caps, dict):
        _drop(caps, drop)
        with open(path, "w") as f:
            json.dump(spec, f)


def main() -> None:
    """Filter the spec for create/run/exec, then exec the real runc."""
    here = os.path.dirname(os.path.realpath(__file__))
    with open(os.path.join(here, "runc-wrapper.json")) as f:
        conf = json.load(f)
    args = sys.argv[1:]
    drop = set(conf["drop"])
    if "create" in args or "run" in args:
        bundle = _option(args, "--bundle", "-b") or os.getcwd()
        _rewrite(os.path.join(bundle, "config.json"), drop, process_only=False)
    elif "exec" in args:
        process = _option(args, "--process", "-p")
        if process:
            _rewrite(process, drop, process_only=True)
    os.execv(conf["runc"], [conf["runc"], *args])


if __name__ == "__main__":
    main()
