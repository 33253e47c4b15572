#!/usr/bin/env bash
# Unpack SGLang's own sources from its PyPI wheel (sglang==0.5.16, no dependencies
# installed, nothing imported) into $SGLANG_ORACLE_DIR (default ~/.cache/sglang-oracle/<version>,
# outside this read-only folder), where oracle.py looks for them. Idempotent. PYTHON picks the
# interpreter whose pip downloads (default python3; make test passes the project's .venv python).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VERSION="${SGLANG_VERSION:-0.5.16}"
DEST="${SGLANG_ORACLE_DIR:-$HOME/.cache/sglang-oracle/$VERSION}"
[ -f "$DEST/.version-$VERSION" ] && { echo "sglang-oracle: sglang $VERSION already unpacked in $DEST"; exit 0; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"${PYTHON:-python3}" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --platform manylinux_2_34_x86_64 -d "$tmp" "sglang==$VERSION"
rm -rf "$DEST"; mkdir -p "$DEST"
"${PYTHON:-python3}" - "$tmp" "$DEST" <<'PY'
import sys, zipfile, glob
whl = glob.glob(sys.argv[1] + "/sglang-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.startswith("sglang/srt/") and n.endswith(".py")]
    z.extractall(sys.argv[2], names)
print(f"sglang-oracle: {len(names)} files of {whl.rsplit('/', 1)[-1]}")
PY
touch "$DEST/.version-$VERSION"
