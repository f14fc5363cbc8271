#!/usr/bin/env bash
# Build the kind node image for Kubernetes v1.35.4 offline, from Debian
# packages and Go modules, and cache it (docker save) under the cache folder.
#
# What kind's own node-image builder does, by hand:
# - base: debootstrap bookworm with systemd, containerd, runc, CNI plugins,
#   iptables, ... plus the files kind's images/base/Dockerfile installs (from
#   the kind module), through node/Dockerfile;
# - kubelet, kubeadm, kubectl, kube-proxy: built from k8s.io/kubernetes with
#   the wrapper module in k8s/ (like hack/controlplane); the control plane
#   (kube-apiserver, kube-controller-manager, kube-scheduler, etcd) is
#   hack/controlplane's build; coredns and crictl from their Go modules; pause
#   from k8s.io/kubernetes's build/pause/linux/pause.c with gcc -static;
# - control-plane images: `docker import` of a tiny root filesystem holding the
#   static binary, tagged with the names `kubeadm config images list` prints,
#   imported into the node's containerd (pinned) in a running base container,
#   which is then committed.
# No kindnetd (not served by the Go module proxy here): the cluster uses
# bridge + host-local CNI and routes between nodes (hack/kind/network.sh).
#
# Usage: hack/kind/node-image.sh     prints the image name
# Env:   LEASEHOLD_CACHE_DIR  cache root (default: ~/.cache/leasehold)
#        DEBIAN_MIRROR        default http://deb.debian.org/debian
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${LEASEHOLD_CACHE_DIR:-${HOME}/.cache/leasehold}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
k8s_version=v1.35.4
kind_version=v0.33.0
coredns_version=v1.14.3
crictl_version=v1.37.0
DOCKER_HOST="$("$repo/hack/docker/ensure.sh")"
export DOCKER_HOST

log() { echo "node-image: $*" >&2; }

# A machine withholding CAP_SYS_RESOURCE cannot give containers a negative
# oom_score_adj: the node's containerd must not ask for one (see node/Dockerfile).
restrict_oom=false
(($((16#$(awk '/^CapBnd:/ {print $2}' /proc/self/status))) >> 24 & 1)) || restrict_oom=true

packages=systemd,systemd-sysv,dbus,containerd,runc,containernetworking-plugins,iptables,nftables,conntrack,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,curl,jq,procps,e2fsprogs,socat,findutils,iputils-ping
key="$( (cat "$here/node-image.sh" "$here/node/Dockerfile" "$here/k8s/go.mod" "$here/k8s/go.sum" \
  "$repo/hack/controlplane/go.mod" "$repo/hack/controlplane/go.sum"; echo "$restrict_oom") | sha256sum | cut -c1-12)"
image="leasehold-kind-node:$k8s_version-$key"
saved="$cache/kind/node-$k8s_version-$key.tar"

if docker image inspect "$image" >/dev/null 2>&1; then
  echo "$image"
  exit 0
fi
if [[ -s "$saved" ]]; then
  log "loading the cached node image $saved"
  docker load -q -i "$saved" >/dev/null
  echo "$image"
  exit 0
fi

start=$(date +%s)
# Host tools this build needs (Debian packages).
missing=()
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v jq >/dev/null || missing+=(jq)
command -v gcc >/dev/null || missing+=(gcc)
[[ -e /usr/lib/x86_64-linux-gnu/libc.a || -e /usr/lib/aarch64-linux-gnu/libc.a ]] || missing+=(libc6-dev)
if ((${#missing[@]})); then
  log "installing ${missing[*]} with apt"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
    --no-install-recommends "${missing[@]}" >&2
fi
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-buildvcs=false"
export GOCACHE="${GOCACHE_OVERRIDE:-$cache/go-build}"
export GOMODCACHE="${GOMODCACHE_OVERRIDE:-$cache/go-mod}"
work="$cache/kind/work-$key"
rm -rf "$work"
mkdir -p "$work/ctx/bin" "$work/images"
cleanup() {
  [[ -n "${cid:-}" ]] && docker rm -f "$cid" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

# -- binaries ------------------------------------------------------------------
kbin="$cache/kind/k8s-$k8s_version-$(cat "$here/k8s/go.mod" "$here/k8s/go.sum" | sha256sum | cut -c1-12)"
if [[ ! -x "$kbin/kubelet" ]]; then
  log "building kubelet, kubeadm, kubectl, kube-proxy $k8s_version (cold: several minutes)"
  pkg=k8s.io/component-base/version
  ldflags="-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=35 \
    -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z \
    -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version \
    -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=35"
  (cd "$here/k8s" && go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$kbin.tmp/" \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubeadm \
    k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kube-proxy >&2)
  rm -rf "$kbin" && mv "$kbin.tmp" "$kbin"
fi
cpbin="$("$repo/hack/controlplane/build.sh")"
gobin() {  # gobin NAME MODULE/PKG@VERSION: go install into the cache once
  local dir="$cache/kind/$1-${2##*@}"
  if [[ ! -x "$dir/$1" ]]; then
    log "building $1 from $2"
    GOBIN="$dir" GOFLAGS="$GOFLAGS -mod=mod" go install -trimpath -ldflags "-s -w" "$2" >&2
  fi
  echo "$dir/$1"
}
coredns="$(gobin coredns "github.com/coredns/coredns@$coredns_version")"
crictl="$(gobin crictl "sigs.k8s.io/cri-tools/cmd/crictl@$crictl_version")"
kindsrc="$(go mod download -json "sigs.k8s.io/kind@$kind_version" | jq -r .Dir)"
k8ssrc="$(go mod download -json "k8s.io/kubernetes@$k8s_version" | jq -r .Dir)"
mkdir -p "$work/pause"
gcc -Os -static -DVERSION=3.10.1 -o "$work/pause/pause" "$k8ssrc/build/pause/linux/pause.c"

# -- root filesystem -----------------------------------------------------------
rootfs="$cache/kind/rootfs-bookworm-$(echo "$packages" | sha256sum | cut -c1-12).tar"
if [[ ! -s "$rootfs" ]]; then
  log "debootstrap bookworm (about a minute)"
  debootstrap --variant=minbase --include="$packages" bookworm "$work/rootfs" "$mirror" >&2
  rm -rf "$work"/rootfs/var/cache/apt/archives/*.deb "$work"/rootfs/var/lib/apt/lists/* \
    "$work"/rootfs/usr/share/doc/* "$work"/rootfs/usr/share/man/*
  tar -C "$work/rootfs" --numeric-owner -cf "$rootfs.tmp" .
  mv "$rootfs.tmp" "$rootfs"
  rm -rf "$work/rootfs"
fi
docker import "$rootfs" "leasehold-kind-rootfs:$key" >/dev/null

# -- node base -----------------------------------------------------------------
cp -r "$kindsrc/images/base/files" "$work/ctx/files"
chmod -R u+w "$work/ctx/files"
install -m 0755 "$kbin/kubelet" "$kbin/kubeadm" "$kbin/kubectl" "$crictl" "$work/ctx/bin/"
docker build -q -f "$here/node/Dockerfile" --build-arg "ROOTFS=leasehold-kind-rootfs:$key" \
  --build-arg "K8S_VERSION=$k8s_version" --build-arg "RESTRICT_OOM_SCORE_ADJ=$restrict_oom" \
  -t "leasehold-kind-base:$key" "$work/ctx" >/dev/null

# -- control-plane images ------------------------------------------------------
# tiny IMAGE DIR BINARY... : an image of the static binaries in DIR/usr/local/bin
tiny() {
  local ref="$1" dir="$work/images/$(echo "$1" | tr '/:' '__')"
  shift
  mkdir -p "$dir/usr/local/bin" "$dir/tmp" "$dir/etc"
  install -m 0755 "$@" "$dir/usr/local/bin/"
  tar -C "$dir" --numeric-owner -c . | docker import \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' "${extra[@]}" - "$ref" >/dev/null
}
refs=()
while read -r ref; do
  extra=()
  case "$ref" in
    */kube-apiserver:*) tiny "$ref" "$cpbin/kube-apiserver" ;;
    */kube-controller-manager:*) tiny "$ref" "$cpbin/kube-controller-manager" ;;
    */kube-scheduler:*) tiny "$ref" "$cpbin/kube-scheduler" ;;
    */etcd:*) tiny "$ref" "$cpbin/etcd" ;;
    */coredns:*)
      extra=(--change 'ENTRYPOINT ["/usr/local/bin/coredns"]')
      tiny "$ref" "$coredns" ;;
    */pause:*)
      extra=(--change 'ENTRYPOINT ["/usr/local/bin/pause"]')
      tiny "$ref" "$work/pause/pause"
      docker tag "$ref" registry.k8s.io/pause:3.10  # kind's containerd config names this one
      refs+=(registry.k8s.io/pause:3.10) ;;
    */kube-proxy:*)
      # kube-proxy programs iptables: the node's own root filesystem carries it.
      mkdir -p "$work/proxy"
      install -m 0755 "$kbin/kube-proxy" "$work/proxy/"
      printf 'FROM leasehold-kind-rootfs:%s\nCOPY kube-proxy /usr/local/bin/\n' "$key" |
        docker build -q -t "$ref" -f - "$work/proxy" >/dev/null ;;
    *) log "no image for $ref"; exit 1 ;;
  esac
  refs+=("$ref")
done < <("$kbin/kubeadm" config images list --kubernetes-version "$k8s_version" 2>/dev/null)
log "images: ${refs[*]}"
docker save -o "$work/images.tar" "${refs[@]}"

# Import them into the node's containerd: run it in a base container, commit.
cid="$(docker run -d --privileged --entrypoint /usr/bin/containerd "leasehold-kind-base:$key")"
for _ in $(seq 100); do
  docker exec "$cid" ctr version >/dev/null 2>&1 && break
  sleep 0.2
done
docker exec -i "$cid" ctr -n k8s.io images import --label=io.cri-containerd.pinned=pinned \
  --all-platforms --no-unpack --digests - <"$work/images.tar" >/dev/null
for ref in "${refs[@]}"; do  # ctr 1.6 ignores --label on import; pinned keeps them from image GC
  docker exec "$cid" ctr -n k8s.io images label "$ref" io.cri-containerd.pinned=pinned >/dev/null
done
docker stop -t 30 "$cid" >/dev/null
docker commit "$cid" "leasehold-kind-committed:$key" >/dev/null
docker rm -f "$cid" >/dev/null
cid=
# docker commit keeps the entrypoint it ran with and cannot set STOPSIGNAL: a
# one-line build puts kind's back.
printf '%s\n' "FROM leasehold-kind-committed:$key" 'ENV container=docker' 'STOPSIGNAL SIGRTMIN+3' \
  'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' 'CMD []' |
  docker build -q -t "$image" - >/dev/null
docker rmi "${refs[@]}" "leasehold-kind-committed:$key" "leasehold-kind-base:$key" "leasehold-kind-rootfs:$key" >/dev/null || true
log "saving the node image to $saved"
docker save -o "$saved.tmp" "$image"
mv "$saved.tmp" "$saved"
log "built $image in $(($(date +%s) - start))s"
echo "$image"
