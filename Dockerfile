# The dra-hami image: every chart runs it (helm/hami-core-gpu, helm/ascend, helm/hygon-dcu and
# helm/cambricon-mlu: `dra run <driver>`
# and the `dra hookdir install` init container; helm/dra-webhook: `dra webhook run`). Build and
# push it yourself, from any Debian-based Python >= 3.11 image:
#
#   docker build -t ghcr.io/project-hami/dra-hami:0.1.0 . && docker push ghcr.io/project-hami/dra-hami:0.1.0
#
# `make image` builds this same file with buildah on a base made from Debian's packages
# (BASE=localhost/dra-base:bookworm, no registry needed) and writes an OCI archive under dist/.
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
# The build machine's pip settings, for the build stage only (a mirror, or the CA of a proxy that
# inspects TLS); unset by default. The runtime stage installs from local wheels only.
ARG PIP_INDEX_URL=https://pypi.org/simple
ARG PIP_CERT
# A compiler for the hook libraries and the Cython extension; Python's headers where the base's
# Python has none (Debian's python3; the python images carry them).
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc make libc6-dev \
       $(python3 -c 'import os, sysconfig; print("" if os.path.exists(sysconfig.get_path("include") + "/Python.h") else "python3-dev")') \
    && rm -rf /var/lib/apt/lists/*
# pyproject.toml's [build-system] requires (the test keeps this list equal to it), in a venv of
# its own: Debian's python3 refuses installs into the system (PEP 668).
ENV PIP_CACHE_DIR=/var/cache/pip
RUN --mount=type=cache,target=/var/cache/pip \
    python3 -m venv /opt/build && /opt/build/bin/pip install "setuptools>=69" "wheel" "Cython>=3.0"
WORKDIR /src
COPY . .
# The runtime's wheel (C hook libraries, stubs for --fake, the Cython extension; the dev rig in
# dev/ is another distribution and stays out), then the wheels of its dependencies and of the
# NVIDIA driver's extra (nvidia-ml-py), so the runtime stage installs without a compiler or the network. pip's
# cache is a build cache mount: a rebuild after a source change downloads nothing again.
RUN --mount=type=cache,target=/var/cache/pip \
    make wheel PY=/opt/build/bin/python DIST=/wheels \
    && /opt/build/bin/pip wheel --wheel-dir /wheels "$(echo /wheels/dra_hami-*.whl)[nvidia]"

# The runtime's venv, installed from the build stage's wheels only. COPY --from is cached by what
# it copies, so new wheels install again (buildah's --layers caches a RUN by its command line:
# with the wheels bind-mounted from the build stage, a source change kept the old venv).
FROM ${BASE} AS install
COPY --from=build /wheels /wheels
RUN python3 -m venv /opt/dra && /opt/dra/bin/pip install --no-cache-dir --no-index --find-links /wheels 'dra-hami[nvidia]'

FROM ${BASE}
# The venv alone: the wheels stay behind in the install stage, in no layer of the image.
COPY --from=install /opt/dra /opt/dra
# The venv first on PATH: the charts run `dra ...`. Long-lived
# processes on a read-only root filesystem (the charts set readOnlyRootFilesystem): no bytecode
# written next to site-packages.
ENV PATH=/opt/dra/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# The charts give the command; this default lists the sub-commands.
ENTRYPOINT ["dra"]
CMD ["--help"]
