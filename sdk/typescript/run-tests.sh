#!/usr/bin/env bash
# Installs @receipt/worker's dev dependencies (npm ci, pinned by
# package-lock.json) when they are missing or stale, builds it (tsc), and
# runs its tests with Node's test runner against the real api binary.
#   RECEIPT_API_BIN  the api binary (default: target/debug/api of this repository)
# Arguments go to `node --test` (test files, or flags such as
# --test-name-pattern=...); the exit status is the tests'.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
export RECEIPT_API_BIN="${RECEIPT_API_BIN:-$repo/target/debug/api}"
cd "$here"

if [ ! -f node_modules/typescript/bin/tsc ] || [ ! -d node_modules/@types/node ] \
    || [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    npm ci --no-audit --no-fund
fi
npm run --silent build

files=()
flags=()
for arg in "$@"; do
    case "$arg" in
        -*) flags+=("$arg") ;;
        *) files+=("$arg") ;;
    esac
done
if [ "${#files[@]}" -eq 0 ]; then
    files=(test/*.test.mjs)
fi

set +e
node --test --test-concurrency="${RECEIPT_TEST_CONCURRENCY:-2}" ${flags[@]+"${flags[@]}"} "${files[@]}"
status=$?
exit "$status"
