#!/bin/bash
# Runs a Python check against real packages from PyPI, in a virtual environment made once under the
# build tree (never at library build time). Skips (exit 77, CTest's SKIP_RETURN_CODE) with a message when
# the packages cannot be installed, e.g. without network access.
# usage: python_interop.sh <venv dir> "<pip packages>" <script.py> [args...]
set -u
venv=$1; packages=$2; shift 2
stamp="$venv/.installed-$(echo "$packages" | tr -c 'A-Za-z0-9.=-' '_')"
mkdir -p "$(dirname "$venv")"
exec 9> "$venv.lock"  # tests running at once make the venv once
flock 9
if [ ! -f "$stamp" ]; then
  py=$(command -v python3) || { echo "SKIP: no python3"; exit 77; }
  "$py" -m venv "$venv" > /dev/null 2>&1 || { echo "SKIP: python3 -m venv failed (Debian: apt install python3-venv)"; exit 77; }
  if ! "$venv/bin/pip" install --disable-pip-version-check --timeout 30 --retries 2 -q $packages > "$venv/pip.log" 2>&1; then
    echo "SKIP: cannot install $packages from PyPI (no network?):"; tail -n 3 "$venv/pip.log"; exit 77
  fi
  touch "$stamp"
fi
flock -u 9
exec "$venv/bin/python" "$@"
