#!/usr/bin/env bash
# Runs every test of the workspace. Installs the pinned nats-server first (integration tests
# start their own servers on free ports with temporary stores).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
# shellcheck source=../deploy/toolchain.sh
. "$repo/deploy/toolchain.sh"
require_rust test
# The Python suites run after the cargo tests: a python3 too old for them (the owed-time
# estimate reads TOML with tomllib, 3.11 and later) is said now, not after the long part.
# PYTHON names another interpreter (as for deploy/install-nats-server.sh), say python3.11
# where python3 is older; the cargo tests that run the Python launcher use it too.
python="${PYTHON:-python3}"
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "test: $python 3.11 or later is required for the Python tests (found: $("$python" --version 2>&1 || echo none)); set PYTHON to one, e.g. PYTHON=python3.11" >&2
  exit 1
fi
export PYTHON="$python"
# The tests set what they need themselves: a FAIRSHARE_* variable of the caller's shell (an
# operator's seed path, another cluster) would reach the binaries they run.
while read -r name; do unset "$name"; done < <(compgen -e | grep '^FAIRSHARE_' || true)
NATS_SERVER_BIN="$("$repo/deploy/install-nats-server.sh")"
export NATS_SERVER_BIN
echo "test: using $("$NATS_SERVER_BIN" --version)" >&2
cargo test --workspace --locked "$@"
# The owed-delivery estimate the README quotes beside the simulator, the Python launcher's
# protobuf code, and the pip-free nats-server installer (Python, no dependencies).
"$python" -m unittest discover --start-directory tools/sim/analysis --pattern 'test_*.py'
"$python" -m unittest discover --start-directory tools/launcher-py --pattern 'test_*.py'
"$python" -m unittest discover --start-directory deploy --pattern 'test_*.py'
