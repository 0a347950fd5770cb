# syntax=docker/dockerfile:1
# layer-locality webhook image.
#   docker build -t layer-locality:0.1.0 .        (or: make image IMG=...)
# Both stages use the same pinned base, so the venv's interpreter symlinks resolve in the final one.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

# --- builder: install the project and its runtime dependencies (all wheels) into a venv ---------
# No extras: the simulator (`sim` extra: jsonpatch, matplotlib) is evaluation tooling, and
# .dockerignore leaves webhook/sim out but for the stub that registers `simulate`.
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/layer-locality
ENV PATH=/opt/layer-locality/bin:$PATH
WORKDIR /src
# Dependencies come from the project's own metadata (pyproject.toml), not a separate list.
COPY pyproject.toml README.md ./
COPY webhook ./webhook
RUN pip install . \
 && layer-locality --help > /dev/null

# --- final: the venv only, no build tools, non-root ----------------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="layer-locality" \
      org.opencontainers.image.description="Mutating admission webhook preferring nodes that already hold a pod's image layers" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/layer-locality/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
COPY --from=builder /opt/layer-locality /opt/layer-locality
# Relative defaults (certs/tls.crt, certs/tls.key) resolve here, e.g. for a local try-out:
#   docker run -p 8443:8443 -v "$PWD/certs:/app/certs:ro" layer-locality:0.1.0 --demo
WORKDIR /app
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["layer-locality", "serve"]
