# The leasehold image: the operator (`leasehold operator`) and the worker
# wrapper (`leasehold run -- CMD`) in one, running as the non-root user 65532
# on a read-only root filesystem.
#
#   make image                       # wheels on the host, then docker build -t leasehold:0.1.0 .
#   kind load docker-image leasehold:0.1.0
#   helm install leasehold deploy/helm/leasehold
#
# The build needs no network: `make image` (hack/docker/image.sh) puts the
# wheels of leasehold[operator] and its dependencies into build/wheels first.
# Where no image registry is reachable, it passes a base made from Debian
# packages as PYTHON_IMAGE (hack/docker/python-base.sh).
#
# Pin the base by digest for reproducible builds: replace the placeholder
# below with the digest of the tag (`docker buildx imagetools inspect
# python:3.11.13-slim-bookworm`), e.g. python:3.11.13-slim-bookworm@sha256:<digest>.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

# -- build: install the wheels into a virtualenv, offline ----------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_NO_INDEX=1
RUN python3 -m venv /opt/leasehold
COPY build/wheels /wheels
RUN /opt/leasehold/bin/pip install --find-links /wheels 'leasehold[operator]' \
 && /opt/leasehold/bin/pip uninstall --yes pip setuptools \
 && /opt/leasehold/bin/leasehold --help >/dev/null

# -- runtime: the virtualenv only, no build tools, no source -------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="leasehold" \
      org.opencontainers.image.description="Run Kubernetes jobs under expiring leases with fencing tokens" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/leasehold/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN groupadd --system --gid 65532 leasehold \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin leasehold
COPY --from=build /opt/leasehold /opt/leasehold
USER 65532:65532
WORKDIR /tmp
# The chart runs `leasehold operator ...`; LeasedJob pod templates run
# `leasehold run -- CMD` (or any command of their own on this image).
ENTRYPOINT ["leasehold"]
CMD ["--help"]
