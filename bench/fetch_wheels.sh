#!/bin/sh
# Wheels the GPU machine lacks for bench/hami_core_gpu_h200.py (its torch environment has
# nvidia-ml-py, pyyaml, requests, aiohttp, ... but not the Kubernetes client the framework imports,
# Cython for the hookcore extension, prometheus_client, typer and rich; its grpcio/protobuf may be
# older than the generated stubs need). The list is what the 2026-12-01 run needed. Run here (where pip reaches PyPI), in the
# repository root; then carry `.whl` to the GPU machine and install it there:
#
#   sh bench/fetch_wheels.sh                          # writes .whl/ (and ignores it in git)
#   # on the GPU machine, first in the command:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
#     && export PYTHONPATH=/tmp/site
#
# Versions are the ones this repository is tested with (pip freeze of its .venv).
set -eu
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> "$(git rev-parse --git-path info/exclude)"
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
  kubernetes==37.0.2 durationpy==0.11 oauthlib==4.0.1 requests-oauthlib==2.0.0 websocket-client==1.9.2 \
  pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 aiohttp-retry==2.9.1 \
  protobuf==7.36.2 grpcio==1.85.3 typing-extensions==4.16.0 \
  Cython==3.3.1 prometheus_client==0.26.0 typer==0.29.2 click==8.5.1 shellingham==1.5.4 rich==15.0.0 \
  markdown-it-py==4.3.0 mdurl==0.1.2
ls .whl
