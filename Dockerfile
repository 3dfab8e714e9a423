# The dra-hami image: every chart runs it (helm/hami-core-gpu and helm/ascend: `python3 -m
# dra.daemon <driver>` and the `dra hookdir install` init container; helm/dra-webhook: `dra
# webhook run`). Build and push it yourself:
#
#   docker build -t ghcr.io/project-hami/dra-hami:0.1.0 . && docker push ghcr.io/project-hami/dra-hami:0.1.0
#
# This project's CI has no container engine, so this file is never built there. Its build steps
# are the commands CI does run: tests/charts/test_image.py runs `make wheel`, installs that
# wheel on its own and runs the charts' commands from it, and checks this file still says so.
FROM python:3.11-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends gcc make libc6-dev \
    && rm -rf /var/lib/apt/lists/*
# pyproject.toml's [build-system] requires (the test keeps this list equal to it).
RUN python3 -m pip install --no-cache-dir "setuptools>=69" "wheel" "Cython>=3.0"
WORKDIR /src
COPY . .
# The project's wheel (C hook libraries, stubs for --fake, the Cython extension), then the wheels
# of its dependencies, so the runtime stage installs without a compiler or the network.
RUN make wheel PY=python3 DIST=/wheels \
    && python3 -m pip wheel --no-cache-dir --wheel-dir /wheels /wheels/dra_hami-*.whl

FROM python:3.11-slim
COPY --from=build /wheels /wheels
RUN python3 -m pip install --no-cache-dir --no-index --find-links /wheels dra-hami && rm -rf /wheels
# Long-lived processes on a read-only root filesystem (the charts set readOnlyRootFilesystem):
# no bytecode written next to site-packages.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# The charts give the command; this default lists the sub-commands.
ENTRYPOINT ["dra"]
CMD ["--help"]
