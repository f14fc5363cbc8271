#!/usr/bin/env bash
# Make sure a Docker engine is reachable and print the DOCKER_HOST to use.
#
# A running engine (DOCKER_HOST, or the default socket) is used as it is. When
# none answers, this starts an engine of the project's own: Debian's docker.io
# (installed with apt if dockerd is missing) with its own socket, data root and
# exec root under the cache folder, so it never touches a system engine.
#
# Quirk handled by detection: when the machine's capability bounding set
# (/proc/self/status CapBnd) lacks capabilities that dockerd hands to
# privileged containers (these Firecracker VMs lack CAP_SYS_RESOURCE), kind's
# node containers fail with "unable to apply caps". The own engine then runs
# containers through runc-wrapper.py, which drops the missing capabilities
# from the OCI spec. A system engine on such a machine that lacks the wrapper
# is not used; the own engine is started instead.
#
# Usage: hack/docker/ensure.sh          prints e.g. unix:///root/.cache/leasehold/docker/docker.sock
#        hack/docker/ensure.sh stop     stops the project's own engine (if this script started one)
# Env:   LEASEHOLD_CACHE_DIR  cache root (default: ~/.cache/leasehold)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${LEASEHOLD_CACHE_DIR:-${HOME}/.cache/leasehold}"
root="$cache/docker"
sock="$root/docker.sock"
own="unix://$sock"
runtime=leasehold-runc

log() { echo "docker/ensure: $*" >&2; }

# Capability names by number (linux/capability.h), to name the missing ones.
cap_names=(CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP
  LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER
  SYS_MODULE SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE
  SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP
  MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF
  CHECKPOINT_RESTORE)

# The capabilities (CAP_X names) that Docker knows but this machine's bounding set lacks.
missing_caps() {
  local bnd last i
  bnd=$((16#$(awk '/^CapBnd:/ {print $2}' /proc/self/status)))
  last=$(cat /proc/sys/kernel/cap_last_cap 2>/dev/null || echo 40)
  ((last > ${#cap_names[@]} - 1)) && last=$((${#cap_names[@]} - 1))
  for ((i = 0; i <= last; i++)); do
    ((bnd >> i & 1)) || echo "CAP_${cap_names[i]}"
  done
}

answers() { DOCKER_HOST="$1" docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

# An engine is usable if it answers and, on a machine missing capabilities,
# runs containers through a runtime that drops them.
usable() {
  answers "$1" || return 1
  [[ -z "$missing" ]] && return 0
  [[ "$(DOCKER_HOST="$1" docker info --format '{{.DefaultRuntime}}' 2>/dev/null)" == "$runtime" ]]
}

stop_own() {
  local pid
  [[ -f "$root/dockerd.pid" ]] || return 0
  pid="$(cat "$root/dockerd.pid")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  fi
  rm -f "$root/dockerd.pid"
}

missing="$(missing_caps | paste -sd ' ' -)"

if [[ "${1:-}" == stop ]]; then
  stop_own
  exit 0
fi

command -v docker >/dev/null || need_install=1
for host in "${DOCKER_HOST:-}" unix:///var/run/docker.sock "$own"; do
  [[ -n "$host" && -z "${need_install:-}" ]] || continue
  if usable "$host"; then
    echo "$host"
    exit 0
  fi
done

mkdir -p "$root"
exec 9>"$root/lock"
flock 9
if [[ -z "${need_install:-}" ]] && usable "$own"; then  # started meanwhile by another caller
  echo "$own"
  exit 0
fi

if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
  log "installing Debian's docker.io with apt"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
    --no-install-recommends docker.io >&2
fi

stop_own
runtimes='{}'
default_runtime=runc
if [[ -n "$missing" ]]; then
  log "this machine's capability bounding set lacks: $missing (containers run through $runtime)"
  mkdir -p "$root/bin"
  install -m 0755 "$here/runc-wrapper.py" "$root/bin/runc-wrapper.py"
  printf '{"runc": "%s", "drop": [%s]}\n' "$(command -v runc)" \
    "$(printf '"%s",' $missing | sed 's/,$//')" >"$root/bin/runc-wrapper.json"
  runtimes="{\"$runtime\": {\"path\": \"$root/bin/runc-wrapper.py\"}}"
  default_runtime=$runtime
fi
cat >"$root/daemon.json" <<JSON
{
  "hosts": ["$own"],
  "data-root": "$root/data",
  "exec-root": "$root/exec",
  "pidfile": "$root/dockerd.pid",
  "runtimes": $runtimes,
  "default-runtime": "$default_runtime"
}
JSON

log "starting dockerd ($own, log $root/dockerd.log)"
rm -f "$sock"
setsid dockerd --config-file "$root/daemon.json" >"$root/dockerd.log" 2>&1 </dev/null &
for _ in $(seq 150); do
  if answers "$own"; then
    echo "$own"
    exit 0
  fi
  kill -0 $! 2>/dev/null || break
  sleep 0.2
done
log "dockerd did not come up; last lines of $root/dockerd.log:"
tail -n 20 "$root/dockerd.log" >&2
exit 1
