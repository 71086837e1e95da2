# syntax=docker/dockerfile:1
#
# function-modelplane: the composition function's image, also the image of the
# cache hydration Job (`python -m jobs.hydrate`) and of the flash loader
# (`python -m jobs.flashload`): the `jobs` extra (huggingface_hub, kubernetes) is
# installed with the dependencies, so nothing is installed at run time.
#
# Both stages use the same Python base image: the virtual environment built in
# the first stage links to that interpreter, so the runtime stage must have the
# same Python minor at the same path.

FROM python:3.11-slim-bookworm AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN python -m venv /venv

WORKDIR /src
# The dependencies first, from pyproject.toml alone (the server's and the `jobs` extra):
# this layer is reused for as long as the dependency lists stay the same, whatever
# happens to the code.
COPY pyproject.toml ./
RUN /venv/bin/python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; print('\\n'.join(p['dependencies'] + p['optional-dependencies']['jobs']))" > requirements.txt \
 && /venv/bin/pip install --no-compile -r requirements.txt
# Then the code, installed without resolving dependencies again.
COPY README.md ./
COPY function ./function
COPY jobs ./jobs
RUN /venv/bin/pip install --no-compile --no-deps '.[jobs]' \
 && /venv/bin/python -m compileall -q /venv/lib


FROM python:3.11-slim-bookworm AS runtime

# A numeric non-root user, so Kubernetes' runAsNonRoot can verify it.
RUN groupadd --system --gid 65532 nonroot \
 && useradd --system --uid 65532 --gid 65532 --create-home --home-dir /home/nonroot nonroot

COPY --from=build /venv /venv

ENV PATH=/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/home/nonroot

USER 65532:65532
WORKDIR /home/nonroot

# 9443: RunFunction gRPC (Crossplane's function port). 8080: Prometheus metrics.
EXPOSE 9443 8080

# Serves by default. Crossplane's function runtime passes TLS_SERVER_CERTS_DIR
# (mTLS); for `crossplane render` or local runs pass --insecure.
ENTRYPOINT ["python", "-m", "function"]
