#!/usr/bin/env bash
# Runs every test of the workspace. Installs the pinned nats-server first (integration tests
# start their own servers on free ports with temporary stores).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
if ! command -v cargo >/dev/null 2>&1; then
  echo "test: cargo is required (install Rust with rustup: https://rustup.rs)" >&2
  exit 1
fi
# The tests set what they need themselves: a FAIRSHARE_* variable of the caller's shell (an
# operator's seed path, another cluster) would reach the binaries they run.
while read -r name; do unset "$name"; done < <(compgen -e | grep '^FAIRSHARE_' || true)
NATS_SERVER_BIN="$("$repo/deploy/install-nats-server.sh")"
export NATS_SERVER_BIN
echo "test: using $("$NATS_SERVER_BIN" --version)" >&2
cargo test --workspace --locked "$@"
# The owed-delivery estimate the README quotes beside the simulator, the Python launcher's
# protobuf code, and the pip-free nats-server installer (Python, no dependencies).
python3 -m unittest discover --start-directory tools/sim/analysis --pattern 'test_*.py'
python3 -m unittest discover --start-directory tools/launcher-py --pattern 'test_*.py'
python3 -m unittest discover --start-directory deploy --pattern 'test_*.py'
