# gpusched worker image: the placement core, the Celery service and the CLI.
#   docker build -t gpusched .
#   docker run --rm -e GPUSCHED_REDIS_URL=redis://redis:6379/0 gpusched worker
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    GPUSCHED_CONFIG_DIR=/app/configs \
    GPUSCHED_LOG_FORMAT=json

WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY scheduler_core ./scheduler_core
COPY tasks ./tasks
COPY configs ./configs
COPY examples ./examples
# Editable install: the data (configs/, the gpusched_configs package) stays next to the
# source tree, as in a checkout. flower serves the monitoring UI in docker-compose.yml;
# it is not a library dependency.
# /var/lib/gpusched: the ACL file docker-compose writes (acl/) and the workers' data
# generation file (state/), owned by the unprivileged user so its volumes are too.
RUN pip install -e . "flower>=2.0,<3" \
    && useradd --system --uid 10001 --home-dir /app gpusched \
    && mkdir -p /var/lib/gpusched/acl /var/lib/gpusched/state \
    && chown -R gpusched /var/lib/gpusched
USER gpusched

# The worker runs unprivileged (Celery warns when started as root).
ENTRYPOINT ["gpusched"]
CMD ["worker", "--concurrency", "1"]
