#!/usr/bin/env bash
# Install SEML 0.5.7 (the upstream tool, for the interoperability tests) into a virtualenv of
# its own and print the venv's path. Cached: when the venv is complete a run only checks it.
#
#   bash tools/seml057_venv.sh            # -> ${XDG_CACHE_HOME:-~/.cache}/seml-hydra/seml057-venv
#   SEML057_VENV=/tmp/x bash tools/seml057_venv.sh
#
# Exits non-zero, with pip's reason on stderr, when SEML cannot be installed.
set -euo pipefail

VERSION=0.5.7
VENV="${SEML057_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/seml-hydra/seml057-venv}"
PYTHON="${PYTHON:-python3}"
MARK="$VENV/.seml-$VERSION-complete"

if [ -f "$MARK" ] && [ -x "$VENV/bin/seml" ]; then
    echo "$VENV"
    exit 0
fi

rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PYTHON" -m venv "$VENV" >&2
log="$(mktemp)"
if ! "$VENV/bin/python" -m pip install --quiet "seml==$VERSION" >"$log" 2>&1; then
    grep -v "is ignored: it is neither a file nor a directory" "$log" >&2 || true
    rm -f "$log"
    rm -rf "$VENV"
    echo "seml057_venv.sh: pip install seml==$VERSION failed (see above)" >&2
    exit 1
fi
rm -f "$log"
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; \
sys.exit(m.version('seml') != '$VERSION')"; then
    echo "seml057_venv.sh: $VENV does not hold SEML $VERSION" >&2
    exit 1
fi
touch "$MARK"
echo "$VENV"
