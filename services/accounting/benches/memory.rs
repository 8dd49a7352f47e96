//! Accounting memory on a real trace: the fold's footprint after 7 days and after 60 days of the
//! msft-itp trace (69,351 jobs, 10 tenants). Memory must follow the window, not history.
//!
//! `cargo bench -p fairshare-accounting --bench memory [-- PATH/TO/replay.csv]`
//!
//! Events are generated from the trace as if nothing queued (submitted, started at submit time,
//! finished after the observed duration): this measures what the fold keeps, not the policy.
//! Footprint is reported as the fold's own counts and as the size of its checkpoint encoding.

use std::time::Instant;

use fairshare_accounting::domain::{FoldConfig, UsageFold};
use fairshare_events::pb::{self, event::Body};

const DAY_MS: i64 = 86_400_000;
const CLUSTER: &str = "itp";

fn main() {
    let path = std::env::args()
        .skip(1)
        .find(|a| a.ends_with(".csv"))
        .unwrap_or_else(|| {
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../tests/data/traces/msft-itp/replay.csv"
            )
            .to_owned()
        });
    let text = std::fs::read_to_string(&path).expect("read the trace");
    // (time, order, event): order keeps a job's own events in lifecycle order at equal times.
    let mut events: Vec<(i64, u8, pb::Event)> = Vec::new();
    let groups: Vec<String> = (1..=10).map(|i| format!("cluster{i:02}")).collect();
    let accounts: Vec<pb::Account> = groups
        .iter()
        .map(|g| pb::Account {
            name: g.clone(),
            share: 1,
            children: vec![],
        })
        .collect();
    events.push((
        0,
        0,
        pb::Event {
            at_ms: 0,
            body: Some(Body::BudgetTreeSet(pb::BudgetTreeSet {
                cluster: CLUSTER.into(),
                accounts,
            })),
        },
    ));
    for n in 0..128 {
        let body = Body::NodeRegistered(pb::NodeRegistered {
            cluster: CLUSTER.into(),
            node: format!("n{n:03}"),
            gpus: 8,
        });
        events.push((
            0,
            0,
            pb::Event {
                at_ms: 0,
                body: Some(body),
            },
        ));
    }
    for line in text.lines().skip(1) {
        let c: Vec<&str> = line.split(',').collect();
        if c.len() < 6 {
            continue;
        }
        let (Ok(submit), Ok(duration), Ok(gpus)) = (
            c[1].parse::<f64>(),
            c[2].parse::<f64>(),
            c[3].parse::<i64>(),
        ) else {
            continue;
        };
        let t = (submit * 1000.0) as i64;
        let end = t + (duration * 1000.0) as i64;
        let job = c[0].to_owned();
        let spec = pb::JobSpec {
            cluster: CLUSTER.into(),
            allocation: c[5].into(),
            gpus,
            min_runtime_s: 900,
            ..Default::default()
        };
        let shape = pb::Shape {
            nodes: 1,
            gpus_per_node: gpus as u32,
        };
        events.push((
            t,
            1,
            pb::Event {
                at_ms: t,
                body: Some(Body::JobSubmitted(pb::JobSubmitted {
                    job_id: job.clone(),
                    idempotency_key: job.clone(),
                    spec: Some(spec),
                    shape: Some(shape),
                })),
            },
        ));
        events.push((
            t,
            2,
            pb::Event {
                at_ms: t,
                body: Some(Body::JobStarted(pb::JobStarted {
                    job_id: job.clone(),
                })),
            },
        ));
        events.push((
            end,
            3,
            pb::Event {
                at_ms: end,
                body: Some(Body::JobFinished(pb::JobFinished {
                    job_id: job,
                    exit_code: 0,
                })),
            },
        ));
    }
    events.sort_by_key(|(t, o, _)| (*t, *o));
    println!("memory: {} events from {path}", events.len());

    let mut fold = UsageFold::new(FoldConfig::default());
    let mut marks = [7 * DAY_MS, 14 * DAY_MS, 30 * DAY_MS, 60 * DAY_MS]
        .into_iter()
        .peekable();
    let start = Instant::now();
    for (seq, (t, _, event)) in events.iter().enumerate() {
        while let Some(&mark) = marks.peek() {
            if *t < mark {
                break;
            }
            report(&fold, mark);
            marks.next();
        }
        fold.apply(seq as u64 + 1, event);
    }
    for mark in marks {
        report(&fold, mark);
    }
    println!(
        "folded {} events in {:.3} s",
        events.len(),
        start.elapsed().as_secs_f64()
    );
}

fn report(fold: &UsageFold, at: i64) {
    let f = fold.footprint();
    let bytes = bincode::serialize(fold).map(|b| b.len()).unwrap_or(0);
    let usage = fold
        .window(CLUSTER, at)
        .map(|w| w.allocations.iter().map(|a| a.charged_gpu_ms).sum::<u64>())
        .unwrap_or(0);
    println!(
        "  day {:>2}: checkpoint {:>9} bytes; jobs {:>6}, curve points {:>7}, budget epochs {}, paths {}; window charged {:.0} GPU-h",
        at / DAY_MS,
        bytes,
        f.jobs,
        f.curve_points,
        f.budget_epochs,
        f.paths,
        usage as f64 / 3.6e6
    );
}
