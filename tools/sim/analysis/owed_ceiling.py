#!/usr/bin/env python3
"""An estimate of the best hourly owed delivery (SPEC section 6) a trace allows.

Not the product's policy: a yardstick for it. It asks how much owed GPU time a policy that
does not split jobs could deliver on a `replay.csv` trace, given far more freedom than the
product has. It is myopic (it optimises each step alone) and its steps leave GPUs freed
mid-step idle, so it is an estimate, not a bound: the simulator's fairshare beats it on
msft-itp. The freedom:

- preemption is free and instant: every `--step` (default 2 min) all work stops and the
  running set is chosen afresh, and no work is lost (no minimum runtimes, no grace, no
  checkpoints);
- the cluster is one pool of GPUs: no nodes, so no fragmentation and no whole-node rule
  (`--gpus-per-node N` packs onto nodes instead, still repacked freely every step);
- the choice looks at the metric itself: each step, every allocation first gets its jobs, in
  submission order, up to its owed rate (min(fraction x GPUs, the GPUs its unfinished jobs
  ask for)), never above it; then an allocation still short may run one job bigger than its
  shortfall if that gains more owed time than the jobs it pushes out lose; then what is left
  fills with any waiting work, allocations short of owed time first, unallocated work last.

Jobs are mapped as the simulator's default rules map them (tools/sim/src/mapping.rs and
services/model/src/trace.rs): rows with GPUs and a duration, submitted within the span;
tenants (user, else group, else "anonymous") ranked by GPU time asked and dealt round-robin
over the budget's allocations in path order; 15% of jobs unallocated by an FNV-1a hash of the
trace id. The metric is the simulator's: per allocation and hour, owed = min(fraction x
capacity x 1 h, demand), demand = GPU-seconds of its unfinished submitted jobs; delivered =
its GPU-seconds run; the run lasts the span rounded up to whole hours.

Usage: owed_ceiling.py TRACE_CSV GPUS [--budget TOML] [--step SECONDS] [--span-days DAYS]
(default budget: deploy/sim/budget.toml, the simulator's).
"""
import argparse
import csv
import os
import tomllib
from collections import defaultdict

HOUR = 3600
DEFAULT_BUDGET = os.path.join(os.path.dirname(__file__), "..", "..", "..", "deploy", "sim", "budget.toml")

# Allocation path -> fraction of the cluster (set from the budget file in main).
FRACTIONS = {}


def fractions(accounts, above=1.0, prefix=""):
    """Leaf path -> fraction: the product of share / sum of sibling shares down the tree."""
    total = sum(a.get("share", 0) for a in accounts.values())
    out = {}
    for name, account in accounts.items():
        share = account.get("share", 0)
        f = above * share / total if total and share else 0.0
        children = {k: v for k, v in account.items() if isinstance(v, dict)}
        path = prefix + name
        if children:
            out.update(fractions(children, f, path + "/"))
        else:
            out[path] = f
    return out


def fnv1a(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def number(text):
    return int(float(text.strip()))


def tenant(row):
    return next((t.strip() for t in (row["user"], row["group"]) if t and t.strip()), "anonymous")


def load(path, span_s):
    with open(path, newline="") as f:
        rows = [
            r
            for r in csv.DictReader(f)
            if number(r["num_gpus"]) > 0 and number(r["duration"]) >= 0 and 0 <= number(r["submit_time"]) < span_s
        ]
    asked = defaultdict(int)
    for r in rows:
        asked[tenant(r)] += number(r["num_gpus"]) * number(r["duration"])
    ranked = sorted(asked.items(), key=lambda kv: (-kv[1], kv[0]))
    paths = sorted(FRACTIONS)
    tenant_alloc = {t: paths[i % len(paths)] for i, (t, _) in enumerate(ranked)}
    jobs = []
    for r in rows:
        jobs.append({
            "submit": number(r["submit_time"]),
            "left": max(number(r["duration"]), 1),
            "gpus": number(r["num_gpus"]),
            "alloc": None if fnv1a(r["job_id"].encode()) % 100 < 15 else tenant_alloc[tenant(r)],
        })
    jobs.sort(key=lambda j: j["submit"])
    return jobs


class Nodes:
    """Free GPUs per node of `gpn` GPUs, refilled each step (free repacking). A job of more
    than `gpn` GPUs takes whole empty nodes; a smaller one the fullest node it fits."""

    def __init__(self, gpus, gpn):
        self.gpn = gpn
        self.free = [gpn] * (gpus // gpn)

    def place(self, g):
        if g > self.gpn:
            empty = [i for i, f in enumerate(self.free) if f == self.gpn]
            k = -(-g // self.gpn)
            if len(empty) < k:
                return False
            for i in empty[:k]:
                self.free[i] = 0
            return True
        best = None
        for i, f in enumerate(self.free):
            if f >= g and (best is None or f < self.free[best]):
                best = i
        if best is None:
            return False
        self.free[best] -= g
        return True


def run(jobs, gpus, step, span_s, gpn=0):
    # The simulator's run lasts the span (without one, to a second past the last submission),
    # rounded up to whole hours.
    end = min(span_s, max(j["submit"] for j in jobs) + 1)
    end = -(-end // HOUR) * HOUR
    waiting = defaultdict(list)  # allocation (None: unallocated) -> unfinished jobs, by submit
    nxt = 0
    delivered_h = defaultdict(float)
    demand_h = defaultdict(float)
    t = 0
    while t < end:
        while nxt < len(jobs) and jobs[nxt]["submit"] <= t:
            j = jobs[nxt]
            waiting[j["alloc"]].append(j)
            nxt += 1
        hour = t // HOUR
        chosen = set()
        used = 0
        run_by = defaultdict(int)
        owed_rate = {}
        for a, f in FRACTIONS.items():
            demand = sum(j["gpus"] for j in waiting[a])
            demand_h[(a, hour)] += demand * step
            owed_rate[a] = min(f * gpus, demand)
        # A: each allocation up to its owed rate, never above.
        for a in FRACTIONS:
            for j in waiting[a]:
                if run_by[a] + j["gpus"] <= owed_rate[a] and used + j["gpus"] <= gpus:
                    chosen.add(id(j))
                    run_by[a] += j["gpus"]
                    used += j["gpus"]
        # B: one bigger job for an allocation still short, when it gains more than it costs.
        for a in sorted(FRACTIONS, key=lambda a: run_by[a] - owed_rate[a]):
            short = owed_rate[a] - run_by[a]
            if short <= 0:
                continue
            rest = [j for j in waiting[a] if id(j) not in chosen]
            if not rest:
                continue
            j = min(rest, key=lambda j: (j["gpus"], j["submit"]))
            free = gpus - used
            push_out = max(0, j["gpus"] - free)
            if j["gpus"] > gpus or min(short, j["gpus"]) <= push_out:
                continue
            # Push out the latest choices of the other allocations, those furthest above their
            # owed rate first.
            victims = []
            for b in sorted(FRACTIONS, key=lambda b: -(run_by[b] - owed_rate[b])):
                if b == a:
                    continue
                for v in reversed(waiting[b]):
                    if push_out <= sum(x["gpus"] for x in victims):
                        break
                    if id(v) in chosen:
                        victims.append(v)
            freed = sum(v["gpus"] for v in victims)
            if freed < push_out:
                continue
            after = dict(run_by)
            for v in victims:
                after[v["alloc"]] -= v["gpus"]
            lost = sum(min(run_by[b], owed_rate[b]) - min(after[b], owed_rate[b]) for b in FRACTIONS if b != a)
            if min(short, j["gpus"]) <= lost:
                continue
            for v in victims:
                chosen.discard(id(v))
                run_by[v["alloc"]] -= v["gpus"]
                used -= v["gpus"]
            chosen.add(id(j))
            run_by[a] += j["gpus"]
            used += j["gpus"]
        # With nodes: pack what A and B chose, multi-node jobs first, then the others largest
        # first; what does not fit waits.
        nodes = Nodes(gpus, gpn) if gpn else None
        if nodes:
            picked = [j for a in FRACTIONS for j in waiting[a] if id(j) in chosen]
            for j in sorted(picked, key=lambda j: (j["gpus"] <= gpn, -j["gpus"], j["submit"])):
                if not nodes.place(j["gpus"]):
                    chosen.discard(id(j))
                    run_by[j["alloc"]] -= j["gpus"]
                    used -= j["gpus"]

        def fits(g):
            return nodes.place(g) if nodes else used + g <= gpus

        # C: fill what is left: allocations short of owed first, then the rest, unallocated last.
        order = sorted(FRACTIONS, key=lambda a: (run_by[a] >= owed_rate[a], a)) + [None]
        for a in order:
            for j in waiting[a]:
                if id(j) not in chosen and fits(j["gpus"]):
                    chosen.add(id(j))
                    run_by[a] += j["gpus"]
                    used += j["gpus"]
        # Run the step.
        for a in list(waiting):
            keep = []
            for j in waiting[a]:
                if id(j) in chosen:
                    ran = min(step, j["left"], end - t)
                    if a is not None:
                        delivered_h[(a, hour)] += j["gpus"] * ran
                    j["left"] -= ran
                    if j["left"] <= 0:
                        continue
                keep.append(j)
            waiting[a] = keep
        t += step
    per = defaultdict(lambda: [0.0, 0.0])
    for (a, h), d in demand_h.items():
        owed = min(FRACTIONS[a] * gpus * HOUR, d)
        per[a][0] += owed
        per[a][1] += min(delivered_h[(a, h)], owed)
    total_owed = sum(v[0] for v in per.values())
    total = sum(v[1] for v in per.values())
    return total / total_owed, {a: v[1] / v[0] for a, v in per.items() if v[0] > 0}, {a: v[0] / 3600 for a, v in per.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("trace")
    p.add_argument("gpus", type=int)
    p.add_argument("--budget", default=DEFAULT_BUDGET, help="budget tree (the simulator's format)")
    p.add_argument("--step", type=int, default=120, help="seconds between choices (divides an hour)")
    p.add_argument("--span-days", type=float, help="replay only this much of the trace")
    p.add_argument(
        "--gpus-per-node",
        type=int,
        default=0,
        help="pack onto nodes of this many GPUs, repacked freely each step (default: one pool)",
    )
    args = p.parse_args()
    if args.step <= 0 or HOUR % args.step:
        p.error("--step must divide 3600")
    with open(args.budget, "rb") as f:
        FRACTIONS.update(fractions(tomllib.load(f)["accounts"]))
    span_s = int(args.span_days * 86400) if args.span_days else 1 << 62
    overall, per, owed = run(load(args.trace, span_s), args.gpus, args.step, span_s, args.gpus_per_node)
    print(f"owed delivered (estimate): {overall * 100:.2f}%")
    for a in sorted(per, key=per.get):
        flag = "" if owed[a] >= 24 else "  (owed < 1 GPU-day)"
        print(f"  {a:40s} {per[a] * 100:6.2f}%  owed {owed[a]:9.1f} GPU-h{flag}")


if __name__ == "__main__":
    main()
