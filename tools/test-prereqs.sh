#!/usr/bin/env bash
# What the test suite needs on a fresh Debian machine, installed when this user may install (root, or
# sudo without a password), then the per-tool setup scripts that exist. Used by `make test` and `.ci/run`.
#
#   Debian packages   redis-server, redis-sentinel (service and failover tests), postgresql (the GPUStack
#                     bridge's tests), chromium (the console's browser tests, driven by Playwright from
#                     the test extras: no browser is downloaded), prometheus (its promtool checks the
#                     alert rules)
#   tool setups       tools/sglang-oracle/setup.sh, tools/gpustack-server/setup.sh (each run when present)
#
# Exit 0: everything is there (the suite may skip nothing); 10: something is missing and this user may not
# install it (the tests that need it skip locally); anything else: an install or a setup failed.
set -euo pipefail
cd "$(dirname "$0")/.."

# package -> a file it provides (how we tell it is installed)
declare -A PROVIDES=(
  [redis-server]=/usr/bin/redis-server
  [redis-sentinel]=/usr/bin/redis-sentinel
  [postgresql]=/usr/lib/postgresql
  [chromium]=/usr/bin/chromium
  [prometheus]=/usr/bin/promtool
)
ORDER=(redis-server redis-sentinel postgresql chromium prometheus)

missing=()
for package in "${ORDER[@]}"; do
  [ -e "${PROVIDES[$package]}" ] || missing+=("$package")
done

can_install() {
  command -v apt-get >/dev/null 2>&1 || return 1
  [ "$(id -u)" -eq 0 ] && return 0
  command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null
}

if [ "${#missing[@]}" -gt 0 ]; then
  if can_install; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo -n"
    echo "test-prereqs: installing Debian packages: ${missing[*]}"
    $SUDO apt-get update -qq
    # --no-install-recommends: promtool without prometheus-node-exporter, chromium without extras
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    for package in "${missing[@]}"; do
      [ -e "${PROVIDES[$package]}" ] || { echo "test-prereqs: $package installed but ${PROVIDES[$package]} is missing" >&2; exit 1; }
    done
    missing=()
  else
    echo "test-prereqs: missing Debian packages: ${missing[*]} (not root and no sudo: the tests that need them skip;" \
         "install them with: sudo apt-get install ${missing[*]})"
  fi
else
  echo "test-prereqs: Debian packages present: ${ORDER[*]}"
fi

# Per-tool setups, written by their owners; each is run only when present and must be idempotent.
for setup in tools/sglang-oracle/setup.sh tools/gpustack-server/setup.sh; do
  if [ -f "$setup" ]; then
    echo "test-prereqs: running $setup"
    bash "$setup"
  fi
done

[ "${#missing[@]}" -eq 0 ] || exit 10
