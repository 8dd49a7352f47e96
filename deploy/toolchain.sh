# Sourced by deploy/start.sh and tools/test.sh: checks, before anything is built, that this
# machine can build the workspace, and says what to install if not. (A distribution's own
# cargo is often older than the workspace's `rust-version`, and would fail deep inside the
# build with a lockfile or edition error that names no way out.)

# require_rust NAME: exits with a message naming NAME unless cargo and rustc are at least the
# workspace's `rust-version` and a C compiler links (crates such as ring build C).
require_rust() {
  local name="$1" repo want have
  repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  if ! command -v cargo >/dev/null 2>&1 || ! command -v rustc >/dev/null 2>&1; then
    echo "$name: cargo and rustc are required: install Rust with rustup (https://rustup.rs), then open a new shell" >&2
    exit 1
  fi
  want="$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' "$repo/Cargo.toml" | head -1)"
  have="$(rustc --version | sed -n 's/^rustc \([0-9][0-9.]*\).*/\1/p')"
  if [ -n "$want" ] && ! version_at_least "$have" "$want"; then
    echo "$name: rustc ${have:-of unknown version} ($(command -v rustc)) is older than the $want this workspace needs (a distribution's package often is): install a current one with rustup (https://rustup.rs), or \`rustup update\`" >&2
    exit 1
  fi
  if ! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1 && ! command -v clang >/dev/null 2>&1; then
    echo "$name: a C compiler and linker are required (Debian/Ubuntu: apt install build-essential)" >&2
    exit 1
  fi
}

# version_at_least HAVE WANT: whether dotted version HAVE >= WANT (missing parts count as 0).
version_at_least() {
  local have="$1" want="$2" i h w
  [ -n "$have" ] || return 1
  IFS=. read -r -a h <<<"$have"
  IFS=. read -r -a w <<<"$want"
  for i in 0 1 2; do
    if ((${h[i]:-0} > ${w[i]:-0})); then return 0; fi
    if ((${h[i]:-0} < ${w[i]:-0})); then return 1; fi
  done
  return 0
}
