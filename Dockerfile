# ore for operators: one image for the core (`ore serve`) and the conduits
# (`ore conduit NAME`), installed from this checkout as the README's quick start does.
# Build: docker build -t ore .      Run everything: docker compose up (compose.yaml)
FROM python:3.12-slim

# Everything ore keeps (threads.db, serve.d/, the web conduit's tokens) lives in
# /var/lib/ore; its settings come from ORE_* variables (docs/configuration.md).
ENV XDG_STATE_HOME=/var/lib \
    PATH=/opt/ore/bin:$PATH \
    PYTHONUNBUFFERED=1

WORKDIR /src
COPY . .
RUN python3 -m venv /opt/ore \
    && /opt/ore/bin/pip install --no-cache-dir ./ ./conduits/stdin ./plugins/openai ./conduits/web \
    && useradd --system --home-dir /var/lib/ore --create-home ore

USER ore
WORKDIR /var/lib/ore
CMD ["ore", "serve"]
