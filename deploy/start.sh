#!/usr/bin/env bash
# Starts the whole local system: nats-server (JetStream, file store under .run/), the
# submission, accounting, decision and preemption services, the demo budget tree and inventory, and the
# demo launcher, which submits jobs from the Helios trace (arriving 600x faster than real time)
# and runs them (60x faster) as the decision service places them. Ctrl-C stops everything.
# Logs: .run/logs/.
#
#   ./deploy/start.sh                          # build, start, follow the event log
#   FAIRSHARE_DEMO_JOBS=0 ./deploy/start.sh    # no demo submissions
#   FAIRSHARE_NATS_AUTH=1 ./deploy/start.sh    # every process with its own nkey (.run/auth)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
run="$repo/.run"
mkdir -p "$run/logs" "$run/nats"

if ! command -v cargo >/dev/null 2>&1; then
  echo "start: cargo is required (install Rust with rustup: https://rustup.rs)" >&2
  exit 1
fi
nats_bin="$("$repo/deploy/install-nats-server.sh")"

echo "start: building (first build takes a few minutes)" >&2
cargo build --quiet -p fairshare-submission -p fairshare-accounting -p fairshare-decision \
  -p fairshare-preemption -p fairshare-launcher -p fairshare-cli
bin="${CARGO_TARGET_DIR:-$repo/target}/debug"

port="${FAIRSHARE_NATS_PORT:-4222}"
export FAIRSHARE_NATS_URL="nats://127.0.0.1:$port"

# With FAIRSHARE_NATS_AUTH=1 the server takes only the roles' nkeys (`fairshare auth init`),
# and each process below connects as its own role: `env "$(as <role>)" <command>` (env execs
# the command, so a background one's pid is the service's own).
auth="${FAIRSHARE_NATS_AUTH:-0}"
conf="$repo/deploy/nats/single.conf"
if [[ "$auth" == 1 ]]; then
  "$bin/fairshare" auth init --dir "$run/auth" >&2
  cat "$conf" "$run/auth/auth.conf" >"$run/nats/server.conf"
  conf="$run/nats/server.conf"
  echo "start: NATS authentication on; the CLI needs --nats-nkey $run/auth/operator.nk" >&2
fi
as() {
  if [[ "$auth" == 1 ]]; then
    printf 'FAIRSHARE_NATS_NKEY=%s' "$run/auth/$1.nk"
  else
    printf 'FAIRSHARE_NATS_AUTH=0'
  fi
}

pids=()
cleanup() {
  trap - INT TERM EXIT
  echo "start: stopping" >&2
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup INT TERM EXIT

"$nats_bin" -c "$conf" -p "$port" -sd "$run/nats" >"$run/logs/nats-server.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  if (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null; then break; fi
  sleep 0.1
done

env "$(as operator)" "$bin/fairshare" streams
env "$(as submission)" "$bin/fairshare-submission" >"$run/logs/submission.log" 2>&1 &
pids+=($!)
env "$(as accounting)" "$bin/fairshare-accounting" --checkpoint-dir "$run/accounting" >"$run/logs/accounting.log" 2>&1 &
pids+=($!)
env "$(as decision)" "$bin/fairshare-decision" --cluster demo --checkpoint-dir "$run/decision-demo" >"$run/logs/decision.log" 2>&1 &
pids+=($!)
env "$(as preemption)" "$bin/fairshare-preemption" --cluster demo --checkpoint-dir "$run/preemption-demo" >"$run/logs/preemption.log" 2>&1 &
pids+=($!)

env "$(as operator)" "$bin/fairshare" inventory apply deploy/demo/inventory.toml
env "$(as operator)" "$bin/fairshare" budget apply deploy/demo/budget.toml

# Demo launcher: runs what the decision service places, and submits the first jobs of the
# Helios trace (tenants hashed onto the demo allocations; see tools/launcher/src/workload.rs).
# Jobs run 60x faster than real time and arrive 600x faster, so the trace's first hours of
# demand pile up within two minutes and the demo cluster is contended: jobs wait, and work
# past its minimum runtime is rotated out for under-served allocations.
env "$(as launcher)" "$bin/fairshare-demo-launcher" --cluster demo --time-scale 60 --arrival-scale 600 \
  --trace tests/data/traces/helios-15k/replay.csv --max-jobs "${FAIRSHARE_DEMO_JOBS:-300}" \
  --allocations research/language/pretraining/core,research/language/pretraining/data,research/language/alignment,research/vision/video,research/vision/robotics,infra/evals,guests \
  >"$run/logs/demo-launcher.log" 2>&1 &
pids+=($!)

echo "start: running; NATS at $FAIRSHARE_NATS_URL; logs in .run/logs; Ctrl-C stops" >&2
env "$(as operator)" "$bin/fairshare" tail --cluster demo
