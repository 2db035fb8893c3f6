#!/usr/bin/env bash
# Makes a venv, installs receipt-worker and its test tools (pinned in
# requirements-test.txt), and runs its tests against the real api binary.
#   RECEIPT_SDK_VENV  the venv's folder (default: sdk/python/.venv)
#   RECEIPT_API_BIN   the api binary (default: target/debug/api of this repository)
#   PYTHON            the interpreter the venv is made with (default: python3)
# Arguments go to pytest; the exit status is pytest's.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${RECEIPT_SDK_VENV:-$here/.venv}"
export RECEIPT_API_BIN="${RECEIPT_API_BIN:-$repo/target/debug/api}"

if [ ! -x "$venv/bin/python" ]; then
    "${PYTHON:-python3}" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements-test.txt"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$here"

cd "$here"
set +e
# The installed package is tested, not the source tree.
env -u PYTHONPATH "$venv/bin/python" -m pytest "$@"
status=$?
exit "$status"
