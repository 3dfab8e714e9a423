# The node daemon image: `dra run <driver>` plus the hookcore libraries a driver mounts into
# workloads. Built by users with `docker build -t dra-hami:dev .`; not built in this project's CI
# (no container engine there).
FROM python:3.11-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends gcc make libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
# The daemon is long-lived: keep Python from writing bytecode next to read-only site-packages.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
ENTRYPOINT ["dra", "run"]
