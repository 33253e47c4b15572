#!/usr/bin/env bash
# Build the virtualenv the GPUStack-bridge tests run GPUStack's own server from.
#
#   bash tools/gpustack-server/setup.sh              # -> ./.gpustack-venv
#   GPUSTACK_VENV=/path/venv bash tools/gpustack-server/setup.sh
#   PYTHON=python3.11 bash tools/gpustack-server/setup.sh
#
# Installs, into a virtualenv of its own (never the project's .venv):
#   * gpustack==2.2.3 from PyPI, its dependencies constrained to the versions of
#     tools/gpustack-oracle/requirements.txt (GPUStack commit 47277d79's lock file):
#     unconstrained, the resolver picks SQLAlchemy 2.1, whose default PostgreSQL driver
#     (psycopg 3) GPUStack 2.2.3 does not install, and its migrations fail;
#   * the gpusched plugin for GPUStack (integrations/gpustack-plugin), which keeps
#     GPUStack's scheduler from starting when GPUSCHED_GPUSTACK_EXTERNAL_SCHEDULER=1.
# uv does the install (seconds with a warm cache). PostgreSQL is not installed here:
# the tests use Debian's (apt-get install postgresql; /usr/lib/postgresql/<v>/bin).
# Re-running is a no-op while the inputs are unchanged (FORCE=1 rebuilds).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="${GPUSTACK_VENV:-$PWD/.gpustack-venv}"
PYTHON="${PYTHON:-python3}"
VERSION="${GPUSTACK_VERSION:-2.2.3}"
CONSTRAINTS="$ROOT/tools/gpustack-oracle/requirements.txt"
PLUGIN="$ROOT/integrations/gpustack-plugin"
START=$(date +%s)
STAMP="$( (cat "$CONSTRAINTS"; echo "$VERSION"; find "$PLUGIN" -type f \( -name '*.py' -o -name '*.toml' \) -print0 \
    | sort -z | xargs -0 cat) | sha256sum | cut -d' ' -f1)"

if [ -z "${FORCE:-}" ] && [ -x "$VENV/bin/gpustack" ] && [ "$(cat "$VENV/.gpustack-stamp" 2>/dev/null)" = "$STAMP" ]; then
    echo "setup.sh: $VENV is up to date (FORCE=1 to rebuild)"
    exit 0
fi

echo "setup.sh: creating $VENV"
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV" || { echo "setup.sh: '$PYTHON -m venv' failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input uv

echo "setup.sh: installing gpustack==$VERSION from PyPI (dependencies constrained by $CONSTRAINTS)"
"$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" -c "$CONSTRAINTS" "gpustack==$VERSION"

echo "setup.sh: installing the gpusched plugin ($PLUGIN)"
"$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" --no-deps "$PLUGIN"

echo "setup.sh: smoke test"
"$VENV/bin/python" -c 'import gpustack.server.server, gpusched_gpustack_plugin' \
    || { echo "setup.sh: GPUStack or the plugin does not import" >&2; exit 1; }
"$VENV/bin/python" - <<'PY' || { echo "setup.sh: the plugin's entry point is not registered" >&2; exit 1; }
from importlib.metadata import entry_points
names = {ep.name for ep in entry_points(group="gpustack.plugins")}
raise SystemExit(0 if "gpusched" in names else 1)
PY

echo "$STAMP" > "$VENV/.gpustack-stamp"
echo "setup.sh: done in $(( $(date +%s) - START )) s: $VENV"
