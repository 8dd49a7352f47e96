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

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$repo"
run="$repo/.run"
mkdir -p "$run/logs" "$run/nats"
# One start at a time over .run: every process started below inherits this lock, so a start
# killed with kill -9 (its trap never ran) leaves it held for as long as any of them still
# runs, and a second start would otherwise find them reconnecting to its server, holding the
# services' checkpoint stores and acting on the same placements.
if ! command -v flock >/dev/null; then
  echo "start: flock (util-linux) is required" >&2
  exit 1
fi
exec 8>"$run/start.lock"
if ! flock -n 8; then
  holders=""
  for fd in /proc/[0-9]*/fd/*; do
    if [[ "$(readlink "$fd" 2>/dev/null)" == "$run/start.lock" ]]; then
      pid="${fd#/proc/}"
      pid="${pid%%/*}"
      # This start holds it open too.
      [[ "$pid" == "$$" ]] || holders+=" $pid"
    fi
  done
  echo "start: processes of an earlier start still run over .run (pids:${holders:- unknown}); stop them (kill${holders:- <pid>}) and start again" >&2
  exit 1
fi

# shellcheck source=toolchain.sh
. "$repo/deploy/toolchain.sh"
require_rust start
# (Not handing the lock to the installer or to cargo: a daemon either leaves behind, a
# compiler cache's server say, would hold it.)
nats_bin="$("$repo/deploy/install-nats-server.sh" 8>&-)"

echo "start: building (the first build takes a few minutes on 2 cores)" >&2
cargo build --locked -p fairshare-submission -p fairshare-accounting -p fairshare-decision \
  -p fairshare-preemption -p fairshare-launcher -p fairshare-cli -p fairshare-sim 8>&-
# Where cargo put them, as cargo says (CARGO_TARGET_DIR, or a target-dir in cargo's config):
# a guess could run stale binaries of an earlier build.
target_dir="$(cargo metadata --no-deps --format-version 1 --locked |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
bin="${target_dir:-${CARGO_TARGET_DIR:-$repo/target}}/debug"

port="${FAIRSHARE_NATS_PORT:-4222}"
http_port="${FAIRSHARE_NATS_HTTP_PORT:-8222}"
auth="${FAIRSHARE_NATS_AUTH:-0}"
demo_jobs="${FAIRSHARE_DEMO_JOBS:-300}"
# Every process below is configured here: a FAIRSHARE_* variable of the caller's shell (a
# FAIRSHARE_CLUSTER the CLI reads, a cluster's FAIRSHARE_STREAM_REPLICAS=3, an operator's seed
# path) would reach the services too.
while read -r name; do unset "$name"; done < <(compgen -e | grep '^FAIRSHARE_' || true)
export FAIRSHARE_NATS_URL="nats://127.0.0.1:$port"
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# Another server on the port (an old one left running, or a distribution's older nats-server)
# would take the services' connections while ours failed to start.
for p in "$port" "$http_port"; do
  if listening "$p"; then
    echo "start: something already listens on 127.0.0.1:$p (an earlier nats-server?); stop it, or set FAIRSHARE_NATS_PORT and FAIRSHARE_NATS_HTTP_PORT" >&2
    exit 1
  fi
done

# With FAIRSHARE_NATS_AUTH=1 the server takes only the roles' nkeys (`fairshare auth init`),
# and each process below connects as its own role: `env "$(as <role>)" <command>` (env execs
# the command, so a background one's pid is the service's own).
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
# Stops every process started here, then exits: with the script's own status at its end, or
# 130 / 143 for Ctrl-C / SIGTERM.
cleanup() {
  local status="${1:-$?}"
  # A second Ctrl-C must not cut the stop short: nats-server, in a session of its own, would
  # be left running.
  trap '' INT TERM
  trap - EXIT
  echo "start: stopping" >&2
  # The services and the launcher first, nats-server once they are gone (or after 10 s): a
  # service lets its lease go and writes its checkpoint as it stops, which needs the server.
  local pid left
  for pid in "${pids[@]:1}"; do kill "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 100); do
    left=0
    for pid in "${pids[@]:1}"; do
      if kill -0 "$pid" 2>/dev/null; then left=1; fi
    done
    ((left)) || break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  exit "$status"
}
trap 'cleanup 130' INT
trap 'cleanup 143' TERM
trap cleanup EXIT

# In a session of its own where setsid is there: a Ctrl-C at the terminal reaches every process
# of its group at once, and the server would go before the services could stop cleanly.
detach=()
if command -v setsid >/dev/null; then detach=(setsid); fi
${detach[@]+"${detach[@]}"} "$nats_bin" -c "$conf" -p "$port" -m "$http_port" -sd "$run/nats" >"$run/logs/nats-server.log" 2>&1 &
nats_pid=$!
pids+=("$nats_pid")
for _ in $(seq 1 100); do
  if ! kill -0 "$nats_pid" 2>/dev/null; then
    echo "start: nats-server exited; its log (.run/logs/nats-server.log) ends:" >&2
    tail -n 5 "$run/logs/nats-server.log" >&2
    exit 1
  fi
  if listening "$port"; then break; fi
  sleep 0.1
done
if ! listening "$port"; then
  echo "start: nats-server did not listen on 127.0.0.1:$port within 10 s (see .run/logs/nats-server.log)" >&2
  exit 1
fi

ready="$(env "$(as operator)" "$bin/fairshare" streams)"
echo "$ready" >&2
# An earlier run's log (kept in .run/nats, which the services resume from) is not printed
# again: the tail below starts after it.
earlier="$(echo "$ready" | sed -n 's/.*ends at sequence \([0-9]*\).*/\1/p')"
earlier="${earlier:-0}"
# What each watched process is called, by pid: if one of them exits, everything stops.
declare -A watched=([$nats_pid]=nats-server)
env "$(as submission)" "$bin/fairshare-submission" --checkpoint-dir "$run/submission" >"$run/logs/submission.log" 2>&1 &
pids+=($!) && watched[$!]=submission
env "$(as accounting)" "$bin/fairshare-accounting" --checkpoint-dir "$run/accounting" >"$run/logs/accounting.log" 2>&1 &
pids+=($!) && watched[$!]=accounting
env "$(as decision)" "$bin/fairshare-decision" --cluster demo --checkpoint-dir "$run/decision-demo" >"$run/logs/decision.log" 2>&1 &
pids+=($!) && watched[$!]=decision
# The demo launcher checkpoints every 30 minutes of job time, 30 s of wall time at 60x: the
# preemption service's lost work and checkpoint limits must assume the same (and an audit of
# the demo's log must be given the same flag).
env "$(as preemption)" "$bin/fairshare-preemption" --cluster demo --checkpoint-interval 30s \
  --checkpoint-dir "$run/preemption-demo" >"$run/logs/preemption.log" 2>&1 &
pids+=($!) && watched[$!]=preemption

# A fresh log gets the demo cluster's nodes and budget tree. A kept one has them already, and
# whatever operators did since (a node removed, another tree applied) stands: applying the
# files again would refuse a removed node and stop the start, or undo a manager's change. The
# marker says both applies went through; a kept log without it (a first start cut short
# between or during them, or a log from before the marker) gets them again, and as each
# leaves what is in place alone, only a change made since can be refused: that is reported,
# and the start goes on.
applied="$run/demo-applied"
apply_demo() {
  env "$(as operator)" "$bin/fairshare" inventory apply --new-cluster deploy/demo/inventory.toml &&
    env "$(as operator)" "$bin/fairshare" budget apply deploy/demo/budget.toml
}
if ((earlier == 0)); then
  rm -f "$applied"
  apply_demo
  touch "$applied"
elif [ ! -e "$applied" ]; then
  if apply_demo; then
    touch "$applied"
  else
    echo "start: warning: deploy/demo's inventory or budget was refused over the kept log (see above); going on with the cluster as the log has it" >&2
  fi
fi

# Demo launcher: runs what the decision service places, and submits the first jobs of the
# Helios trace (tenants hashed onto the demo allocations; see tools/launcher/src/workload.rs).
# Jobs run 60x faster than real time and arrive 600x faster, so the trace's first hours of
# demand pile up within two minutes and the demo cluster is contended: jobs wait, and work
# past its minimum runtime is rotated out for under-served allocations.
# Each start is a new run of the demo (a run's keys are not submitted twice, so the same name
# would submit nothing on a second start over the kept log).
env "$(as launcher)" "$bin/fairshare-demo-launcher" --cluster demo --time-scale 60 --arrival-scale 600 \
  --run "$(date +%Y%m%d-%H%M%S)" \
  --trace tests/data/traces/helios-15k/replay.csv --max-jobs "$demo_jobs" \
  --allocations research/language/pretraining/core,research/language/pretraining/data,research/language/alignment,research/vision/video,research/vision/robotics,infra/evals,guests \
  >"$run/logs/demo-launcher.log" 2>&1 &
pids+=($!) && watched[$!]=demo-launcher

echo "start: running; NATS at $FAIRSHARE_NATS_URL; logs in .run/logs; Ctrl-C stops" >&2
if ((earlier > 0)); then
  echo "start: the event log of earlier runs (through sequence $earlier) is kept in .run/nats, with the nodes and budget tree as they left them (deploy/demo's files are applied once, to a fresh log); rm -rf .run for a fresh start" >&2
fi
env "$(as operator)" "$bin/fairshare" tail --cluster demo --from "$((earlier + 1))" &
tail_pid=$!
pids+=("$tail_pid")
watched[$tail_pid]=tail
# Until nats-server, a service or the tail exits (the tail would otherwise wait silently for
# a server that is gone, and a dead service would leave the demo stuck without a word).
# Polled, not `wait -n -p` (bash 5.1 and later only); Ctrl-C reaches the trap within a second.
exited=""
while [[ -z "$exited" ]]; do
  for pid in "${!watched[@]}"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      exited="$pid"
      break
    fi
  done
  [[ -n "$exited" ]] || sleep 1
done
if [[ "$exited" == "$tail_pid" ]]; then
  echo "start: the event tail (fairshare tail) exited; stopping" >&2
  exit 1
fi
if [[ -n "${watched[$exited]:-}" ]]; then
  name="${watched[$exited]}"
  log="$run/logs/$name.log"
  echo "start: $name exited; its log (${log#"$repo"/}) ends:" >&2
  tail -n 5 "$log" >&2
  exit 1
fi
