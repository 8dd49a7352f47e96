//! `fairshare node …` against a real nats-server and a running preemption service: a cordoned
//! node with nothing on it is reported drained by the service and listed so, and can then be
//! removed; unknown nodes, removals of nodes in service or still holding a job, empty or past
//! maintenance windows, and windows that would cut a running job's minimum runtime (unless
//! forced) are refused with nothing written; a change already in place writes
//! nothing; an inventory file that still lists a removed node brings it back only with
//! `--readd`.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use crate::common::{stderr, stdout};

use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use fairshare_e2e::{CLUSTER, INVENTORY, Stack};
use fairshare_events::pb::{self, event::Body};
use fairshare_events::subjects;
use fairshare_runtime::clock::SystemClock;
use fairshare_testkit::events::shaped_submitted;

/// A preemption service following the stack's log, as a deployment runs one.
struct Preemption {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), fairshare_preemption::shell::ServiceError>>,
}

impl Preemption {
    async fn start(stack: &Stack) -> Preemption {
        let client = async_nats::connect(stack.server.url()).await.unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(fairshare_preemption::shell::run(
            client,
            fairshare_preemption::shell::Config::new(CLUSTER),
            Arc::new(SystemClock),
            async {
                let _ = stopped.await;
            },
        ));
        Preemption { stop, task }
    }

    /// Stops it; it must have served without error.
    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap().unwrap();
    }
}

/// The test inventory's node names, in its order.
fn node_names() -> Vec<String> {
    fairshare_model::files::parse_inventory(INVENTORY)
        .unwrap()
        .nodes
        .into_iter()
        .map(|(n, _)| n)
        .collect()
}

/// Runs `fairshare node <args>` for the test cluster.
async fn node(stack: &Stack, args: &[&str]) -> Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_fairshare"));
    command
        .args(["node", args[0], "--nats-url", &stack.server.url()])
        .args(["--cluster", CLUSTER])
        .args(&args[1..]);
    tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap()
}

/// The node and maintenance events in the log, as (kind, node or nodes).
async fn node_events(stack: &Stack) -> Vec<(&'static str, String)> {
    stack
        .all_events()
        .await
        .unwrap()
        .into_iter()
        .filter_map(|(_, _, e)| match e.body? {
            Body::NodeCordoned(n) => Some(("cordoned", n.node)),
            Body::NodeUncordoned(n) => Some(("uncordoned", n.node)),
            Body::NodeDrained(n) => Some(("drained", n.node)),
            Body::NodeRemoved(n) => Some(("removed", n.node)),
            Body::MaintenanceScheduled(m) => Some(("maintenance", m.nodes.join(","))),
            Body::MaintenanceCancelled(m) => Some(("cancelled", m.nodes.join(","))),
            _ => None,
        })
        .collect()
}

/// Runs `fairshare inventory apply FILE` against the stack, with `flags`.
async fn inventory_apply(stack: &Stack, file: &std::path::Path, flags: &[&str]) -> Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_fairshare"));
    command
        .args(["inventory", "apply", "--nats-url", &stack.server.url()])
        .arg(file)
        .args(flags);
    tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap()
}

/// An inventory file of the test cluster holding `nodes` (its `[[nodes]]` tables).
fn inventory_file(nodes: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), format!("cluster = \"{CLUSTER}\"\n{nodes}")).unwrap();
    file
}

/// How many node registrations the log holds.
async fn registrations(stack: &Stack) -> usize {
    stack
        .all_events()
        .await
        .unwrap()
        .into_iter()
        .filter(|(_, _, e)| matches!(e.body, Some(Body::NodeRegistered(_))))
        .count()
}

/// Waits until the listing's line for `name` contains `words`.
async fn listed_as(stack: &Stack, name: &str, words: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let out = stdout(&node(stack, &["list"]).await);
        if out
            .lines()
            .any(|l| l.trim_start().starts_with(name) && l.contains(words))
        {
            return out;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} never listed as {words:?}:\n{out}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordon_drain_remove_and_maintenance() {
    let stack = Stack::start().await.unwrap();
    let preemption = Preemption::start(&stack).await;
    let names = node_names();
    let (first, second) = (names[0].as_str(), names[1].as_str());

    let out = stdout(&node(&stack, &["list"]).await);
    assert!(
        out.starts_with("cluster alpha: 4 nodes, 32 GPUs\n"),
        "{out}"
    );
    assert_eq!(out.matches("in service").count(), 4, "{out}");

    // Refused, nothing written: an unknown node (even beside a known one), a node in service.
    let ghost = node(&stack, &["cordon", first, "ghost"]).await;
    assert!(!ghost.status.success());
    assert!(
        stderr(&ghost).contains("no node ghost in cluster alpha"),
        "{}",
        stderr(&ghost)
    );
    let busy = node(&stack, &["remove", first]).await;
    assert!(!busy.status.success());
    assert!(stderr(&busy).contains(&format!("in service: {first};")));
    assert_eq!(node_events(&stack).await, []);

    // Cordoned with nothing on it (named twice: once is enough), the preemption service reports
    // it drained.
    let cordon = node(&stack, &["cordon", first, first, "--reason", "disk swap"]).await;
    assert!(cordon.status.success(), "{}", stderr(&cordon));
    assert_eq!(stdout(&cordon).matches("cordoned at sequence").count(), 1);
    let out = listed_as(&stack, first, "cordoned, drained (disk swap)").await;
    assert_eq!(out.matches("in service").count(), 3, "{out}");
    // Asked again: already so, nothing written.
    let again = node(&stack, &["cordon", first]).await;
    assert!(
        stdout(&again).contains("already cordoned, drained"),
        "{}",
        stdout(&again)
    );
    assert_eq!(
        node_events(&stack).await,
        [
            ("cordoned", first.to_owned()),
            ("drained", first.to_owned())
        ]
    );

    let removed = node(&stack, &["remove", first]).await;
    assert!(removed.status.success(), "{}", stderr(&removed));
    let out = listed_as(&stack, first, "removed").await;
    assert!(
        out.starts_with("cluster alpha: 3 nodes, 24 GPUs\n"),
        "{out}"
    );
    // Removed twice: the second time there is nothing to do.
    let twice = node(&stack, &["remove", first]).await;
    assert!(twice.status.success(), "{}", stderr(&twice));
    assert!(
        stdout(&twice).contains("already removed"),
        "{}",
        stdout(&twice)
    );
    // Refused, with the way back that works (a plain apply refuses a removed node, below).
    let gone = node(&stack, &["cordon", first]).await;
    assert!(
        stderr(&gone).contains("removed from the inventory")
            && stderr(&gone).contains("`fairshare inventory apply --readd FILE`"),
        "{}",
        stderr(&gone)
    );

    // The inventory file still lists it: applying the file (for some other change) does not
    // put it back in service unless asked, and writes nothing for nodes already as it says.
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), INVENTORY).unwrap();
    let before = registrations(&stack).await;
    let refused = inventory_apply(&stack, file.path(), &[]).await;
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains(first) && stderr(&refused).contains("--readd"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(registrations(&stack).await, before, "nothing written");
    let readded = inventory_apply(&stack, file.path(), &["--readd"]).await;
    assert!(readded.status.success(), "{}", stderr(&readded));
    assert!(
        stdout(&readded).contains("1 registered, 3 already as the file says"),
        "{}",
        stdout(&readded)
    );
    assert_eq!(registrations(&stack).await, before + 1);
    listed_as(&stack, first, "in service").await;
    // Removed again, for what follows.
    let cordoned = node(&stack, &["cordon", first]).await;
    assert!(cordoned.status.success(), "{}", stderr(&cordoned));
    listed_as(&stack, first, "drained").await;
    let removed = node(&stack, &["remove", first]).await;
    assert!(removed.status.success(), "{}", stderr(&removed));

    // Maintenance: refused when empty or over, listed when ahead.
    for (start, end) in [
        ("+3h", "+1h"),
        ("now", "now"),
        ("2020-01-01T00:00:00Z", "2020-01-02T00:00:00Z"),
        // Started long ago and not over: a typo, not a window (use "now").
        ("2020-01-01T00:00:00Z", "+2m"),
    ] {
        let bad = node(
            &stack,
            &["maintenance", second, "--start", start, "--end", end],
        )
        .await;
        assert!(!bad.status.success());
        assert!(stderr(&bad).contains("nothing written"), "{}", stderr(&bad));
    }
    let bad_time = node(
        &stack,
        &["maintenance", second, "--start", "soon", "--end", "+2h"],
    )
    .await;
    assert!(
        stderr(&bad_time).contains("invalid time \"soon\""),
        "{}",
        stderr(&bad_time)
    );
    // A window that never ends would close the node for good; a cap of 0 checks nothing.
    for (args, said) in [
        (
            ["--start", "now", "--end", "9223372036854775807ms"].as_slice(),
            "--end 9223372036854775807ms: a window outside the years 1 to 9999 can only be \
             cancelled",
        ),
        (
            ["--start", "+1h", "--end", "+2h", "--max-min-runtime", "0s"].as_slice(),
            "--max-min-runtime 0: the preemption service refuses a cap of 0",
        ),
    ] {
        let refused = node(&stack, &[["maintenance", second].as_slice(), args].concat()).await;
        assert!(!refused.status.success());
        assert!(stderr(&refused).contains(said), "{}", stderr(&refused));
    }
    let window = node(
        &stack,
        &[
            "maintenance",
            second,
            "--start",
            "+1h",
            "--end",
            "+3h",
            "--reason",
            "bios",
        ],
    )
    .await;
    assert!(window.status.success(), "{}", stderr(&window));
    let out = stdout(&node(&stack, &["list"]).await);
    assert_eq!(out.matches("maintenance ").count(), 1, "{out}");
    assert!(out.contains("(bios)"), "{out}");
    // Taken back with the times `list` prints; other times are refused.
    let times: Vec<&str> = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("maintenance "))
        .unwrap()
        .split_whitespace()
        .collect();
    let (start, end) = (times[0], times[2]);
    // The same window again: already in place, nothing written.
    let again = node(
        &stack,
        &["maintenance", second, "--start", start, "--end", end],
    )
    .await;
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        stdout(&again).contains("already scheduled"),
        "{}",
        stdout(&again)
    );
    let wrong = node(
        &stack,
        &[
            "maintenance",
            second,
            "--cancel",
            "--start",
            start,
            "--end",
            "+9h",
        ],
    )
    .await;
    assert!(!wrong.status.success());
    assert!(
        stderr(&wrong).contains("no maintenance window"),
        "{}",
        stderr(&wrong)
    );
    // `node maintenance NODES --cancel` of the window from `start` to `end`.
    let cancel_on = |nodes: &[&str]| {
        let mut args = vec!["maintenance".to_owned()];
        args.extend(nodes.iter().map(|n| (*n).to_owned()));
        args.extend(["--cancel", "--start", start, "--end", end].map(String::from));
        let stack = &stack;
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            node(stack, &args).await
        }
    };
    let cancelled = cancel_on(&[second]).await;
    assert!(cancelled.status.success(), "{}", stderr(&cancelled));
    let out = stdout(&node(&stack, &["list"]).await);
    assert_eq!(out.matches("maintenance ").count(), 0, "{out}");
    // Sent again (a retry after an unknown outcome): already so, nothing written.
    let again = cancel_on(&[second]).await;
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(
        stdout(&again).contains("already cancelled from"),
        "{}",
        stdout(&again)
    );
    // A removed node named in a cancel took its windows with it: nothing to refuse there.
    let with_removed = cancel_on(&[second, first]).await;
    assert!(with_removed.status.success(), "{}", stderr(&with_removed));
    assert!(
        stdout(&with_removed).contains(&format!(
            "{first}: removed from the inventory, which took its maintenance windows with it"
        )) && stdout(&with_removed).contains("already cancelled from"),
        "{}",
        stdout(&with_removed)
    );
    // A window on two nodes taken back from one, then both named: the cancel written (and
    // the line saying so) names only the node where it was still in place.
    let other = names[2].as_str();
    let both = node(
        &stack,
        &["maintenance", second, other, "--start", start, "--end", end],
    )
    .await;
    assert!(both.status.success(), "{}", stderr(&both));
    assert!(cancel_on(&[second]).await.status.success());
    let rest = cancel_on(&[second, other]).await;
    assert!(rest.status.success(), "{}", stderr(&rest));
    assert!(
        stdout(&rest).contains(&format!(
            "maintenance of {other} from {start} to {end} cancelled"
        )),
        "{}",
        stdout(&rest)
    );

    let not_cordoned = node(&stack, &["uncordon", second]).await;
    assert!(stdout(&not_cordoned).contains("not cordoned"));
    assert_eq!(
        node_events(&stack).await,
        [
            ("cordoned", first.to_owned()),
            ("drained", first.to_owned()),
            ("removed", first.to_owned()),
            // Back in service by the inventory's --readd, then out again.
            ("cordoned", first.to_owned()),
            ("drained", first.to_owned()),
            ("removed", first.to_owned()),
            ("maintenance", second.to_owned()),
            ("cancelled", second.to_owned()),
            ("maintenance", format!("{second},{}", names[2])),
            ("cancelled", second.to_owned()),
            ("cancelled", names[2].clone()),
        ]
    );

    // Cordon and uncordon a node in service: back in service, with the events to show it.
    assert!(node(&stack, &["cordon", second]).await.status.success());
    let back = node(&stack, &["uncordon", second]).await;
    assert!(
        stdout(&back).contains("back in service"),
        "{}",
        stdout(&back)
    );
    listed_as(&stack, second, "in service").await;
    let events = node_events(&stack).await;
    assert!(
        events.contains(&("uncordoned", second.to_owned())),
        "{events:?}"
    );

    // A cordoned node still holding a job (protected for 15 min) is not removed.
    let third = names[2].as_str();
    let job = "019ad1c4-0000-7000-8000-000000000001";
    let submitted = Body::JobSubmitted(pb::JobSubmitted {
        job_id: job.into(),
        spec: fairshare_e2e::request("k1").spec,
        shape: Some(pb::Shape {
            nodes: 1,
            gpus_per_node: 1,
        }),
        ..Default::default()
    });
    let placed = fairshare_testkit::events::placed_on(job, third, 1);
    let started = Body::JobStarted(pb::JobStarted { job_id: job.into() });
    for (kind, body) in [
        ("job_submitted", submitted),
        ("job_placed", placed),
        ("job_started", started),
    ] {
        let subject = subjects::job_event(CLUSTER, job, kind);
        stack
            .append(subject, body, &format!("t-{kind}"))
            .await
            .unwrap();
    }
    // A window that would start inside its protection is refused, naming it, unless forced.
    let before = node_events(&stack).await.len();
    let cutting = node(
        &stack,
        &["maintenance", third, "--start", "+5m", "--end", "+1h"],
    )
    .await;
    assert!(!cutting.status.success());
    assert!(
        stderr(&cutting).contains(&format!(
            "would cut the minimum runtime of {job} on {third}"
        )) && stderr(&cutting).contains("nothing written"),
        "{}",
        stderr(&cutting)
    );
    assert_eq!(node_events(&stack).await.len(), before);
    // Under a preemption cap of a minute the job is protected for a minute only: no cut.
    let capped = node(
        &stack,
        &[
            "maintenance",
            third,
            "--start",
            "+5m",
            "--end",
            "+1h",
            "--max-min-runtime",
            "1m",
        ],
    )
    .await;
    assert!(capped.status.success(), "{}", stderr(&capped));
    let later = node(
        &stack,
        &["maintenance", third, "--start", "+1h", "--end", "+2h"],
    )
    .await;
    assert!(later.status.success(), "{}", stderr(&later));
    let forced = node(
        &stack,
        &[
            "maintenance",
            third,
            "--start",
            "+6m",
            "--end",
            "+1h",
            "--force",
        ],
    )
    .await;
    assert!(forced.status.success(), "{}", stderr(&forced));
    assert_eq!(node_events(&stack).await.len(), before + 3);
    assert!(node(&stack, &["cordon", third]).await.status.success());
    let holding = node(&stack, &["remove", third]).await;
    assert!(!holding.status.success());
    assert!(
        stderr(&holding).contains(&format!("still holding work: {third} (holds {job})")),
        "{}",
        stderr(&holding)
    );
    let forced = node(&stack, &["remove", third, "--force"]).await;
    assert!(forced.status.success(), "{}", stderr(&forced));
    listed_as(&stack, third, "removed").await;

    preemption.stop().await;
}

/// `inventory apply` that gives a busy node fewer GPUs than its jobs hold is refused, naming
/// the node and its jobs, with nothing written; with `--force` it is written, and a queued job
/// no node could hold any more is named in a warning (the decision service then says it can
/// never start, rather than that it waits for room).
#[tokio::test]
async fn shrinking_a_busy_node_is_refused_and_stranded_jobs_are_named() {
    let stack = Stack::start().await.unwrap();
    let first = node_names().remove(0);
    let job = |id: &str, body: Body| {
        let event = pb::Event {
            at_ms: 0,
            body: Some(body),
        };
        let kind = fairshare_events::codec::event_kind(&event);
        (subjects::job_event(CLUSTER, id, kind), event.body.unwrap())
    };
    let submitted = |id: &str, nodes: u32, gpus_per_node: u32| {
        shaped_submitted(CLUSTER, "research/nlp", id, nodes, gpus_per_node, 60)
    };
    let placed = fairshare_testkit::events::placed_on("busy", &first, 5);
    for (i, (subject, body)) in [
        job("busy", submitted("busy", 1, 5)),
        job("busy", placed),
        job("wide", submitted("wide", 4, 8)),
    ]
    .into_iter()
    .enumerate()
    {
        stack.append(subject, body, &format!("m{i}")).await.unwrap();
    }

    let file = inventory_file(&format!("[[nodes]]\nname = \"{first}\"\ngpus = 4\n"));
    let before = registrations(&stack).await;
    let refused = inventory_apply(&stack, file.path(), &[]).await;
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains(&format!(
            "fewer GPUs than their jobs hold: {first}: 4 GPUs, but its jobs hold 5 (busy)"
        )) && stderr(&refused).contains("--force"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(registrations(&stack).await, before, "nothing written");

    let forced = inventory_apply(&stack, file.path(), &["--force"]).await;
    assert!(forced.status.success(), "{}", stderr(&forced));
    assert_eq!(registrations(&stack).await, before + 1);
    assert!(
        stderr(&forced).contains("warning: no node could hold 1 queued job any more: wide;"),
        "{}",
        stderr(&forced)
    );
}

/// Growing nodes strands a queued multi-node job as surely as shrinking them: it needs whole
/// nodes of exactly its GPUs per node. The change is written (nothing runs on them to refuse
/// it for) and the job is named in a warning, as a typed `16` for `8` would want.
#[tokio::test]
async fn growing_nodes_names_the_multi_node_jobs_it_strands() {
    let stack = Stack::start().await.unwrap();
    let submitted = shaped_submitted(CLUSTER, "research/nlp", "pair", 2, 8, 60);
    stack
        .append(
            subjects::job_event(CLUSTER, "pair", "job_submitted"),
            submitted,
            "m0",
        )
        .await
        .unwrap();
    let file = inventory_file("[[nodes]]\nprefix = \"gpu\"\ncount = 4\ngpus = 16\n");
    let before = registrations(&stack).await;
    let grown = inventory_apply(&stack, file.path(), &[]).await;
    assert!(grown.status.success(), "{}", stderr(&grown));
    assert_eq!(registrations(&stack).await, before + 4);
    assert!(
        stderr(&grown).contains("warning: no node could hold 1 queued job any more: pair;"),
        "{}",
        stderr(&grown)
    );
}

/// A drained report is fenced on the node's events, a placement on its job's: a placement
/// decided before the cordon can land just after the preemption service reported the node
/// drained, or just before a report decided without it. Either way the listing says the node is
/// draining, as the services' fold has work on it, until the service reports it empty again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_report_of_a_node_holding_work_is_listed_as_draining() {
    let stack = Stack::start().await.unwrap();
    let preemption = Preemption::start(&stack).await;
    let names = node_names();
    let (first, second) = (names[0].as_str(), names[1].as_str());
    let line_of = |out: &str, name: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_default()
            .to_owned()
    };
    // Two jobs queued before any cordon: a decision made then may place them anywhere.
    for (i, job) in ["late", "early"].iter().enumerate() {
        let submitted = shaped_submitted(CLUSTER, "research/nlp", job, 1, 2, 3600);
        stack
            .append(
                subjects::job_event(CLUSTER, job, "job_submitted"),
                submitted,
                &format!("s{i}"),
            )
            .await
            .unwrap();
    }
    let placed = |job: &str, node: &str| {
        (
            subjects::job_event(CLUSTER, job, "job_placed"),
            fairshare_testkit::events::placed_on(job, node, 2),
        )
    };

    // The placement lands after the service reported the node drained.
    let cordon = node(&stack, &["cordon", first]).await;
    assert!(cordon.status.success(), "{}", stderr(&cordon));
    listed_as(&stack, first, "cordoned, drained").await;
    let (subject, body) = placed("late", first);
    stack.append(subject, body, "p-late").await.unwrap();
    let out = stdout(&node(&stack, &["list"]).await);
    assert!(line_of(&out, first).contains("cordoned, draining"), "{out}");

    // The placement lands first, then a report decided before it (written here as the
    // service would have, fenced on the node's events only).
    let (subject, body) = placed("early", second);
    stack.append(subject, body, "p-early").await.unwrap();
    let cordon = node(&stack, &["cordon", second]).await;
    assert!(cordon.status.success(), "{}", stderr(&cordon));
    stack
        .append(
            subjects::node(CLUSTER, second),
            Body::NodeDrained(pb::NodeDrained {
                cluster: CLUSTER.into(),
                node: second.into(),
            }),
            "stale-report",
        )
        .await
        .unwrap();
    let out = stdout(&node(&stack, &["list"]).await);
    assert!(
        line_of(&out, second).contains("cordoned, draining"),
        "{out}"
    );
    assert_eq!(out.matches("in service").count(), 2, "{out}");

    preemption.stop().await;
}

/// A command that changes several nodes makes every change even when its reader has gone
/// after the first line (`| grep -q cordoned`) or its output cannot be written: the output is
/// held until the writes are done, so no node is left half-way.
#[tokio::test]
async fn a_reader_gone_stops_no_command_half_way() {
    let stack = Stack::start().await.unwrap();
    let names = node_names();
    assert!(names.len() > 1);
    let run = |args: Vec<String>| async move {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_fairshare"));
        command.args(args);
        tokio::task::spawn_blocking(move || fairshare_testkit::run_with_stdout_closed(&mut command))
            .await
            .unwrap()
            .unwrap()
    };
    let url = stack.server.url();
    let mut cordon: Vec<String> = ["node", "cordon", "--nats-url", &url, "--cluster", CLUSTER]
        .map(String::from)
        .to_vec();
    cordon.extend(names.iter().cloned());
    let out = run(cordon).await;
    assert_eq!(out.status.code(), Some(141), "{}", stderr(&out));
    let cordoned: Vec<String> = node_events(&stack)
        .await
        .into_iter()
        .filter(|(kind, _)| *kind == "cordoned")
        .map(|(_, node)| node)
        .collect();
    assert_eq!(cordoned, names, "every node named is cordoned");

    let file = inventory_file("[[nodes]]\nprefix = \"extra\"\ncount = 3\ngpus = 8\n");
    let before = registrations(&stack).await;
    let path = file.path().to_string_lossy().into_owned();
    let out = run(["inventory", "apply", "--nats-url", &url, &path]
        .map(String::from)
        .to_vec())
    .await;
    assert_eq!(out.status.code(), Some(141), "{}", stderr(&out));
    assert_eq!(
        registrations(&stack).await,
        before + 3,
        "every node registered"
    );
}

/// A node whose write is never acknowledged (the server drops it: this operator's identity may
/// not publish on that node's subject) does not stop the nodes after it, in `node cordon` or
/// `inventory apply`: they are changed, it is named at the end, and the command exits 3
/// (outcome unknown: run it again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_cannot_be_changed_does_not_stop_the_others() {
    use fairshare_runtime::auth::{self, Role};
    use fairshare_runtime::clock::Clock;
    // The identities `fairshare auth init` writes, the operator's barred from one node.
    let dir = tempfile::tempdir().unwrap();
    let block = auth::init(dir.path()).unwrap();
    let (before, operator) = block.split_once("    # operator\n").unwrap();
    let denied = subjects::node(CLUSTER, "gpu001");
    let operator = operator.replacen(
        "publish: { allow: [",
        &format!("publish: {{ deny: [\"{denied}\"], allow: ["),
        1,
    );
    // And a user free to do anything, to register the nodes.
    let config =
        format!("{before}    {{ user: setup, password: setup }}\n    # operator\n{operator}");
    let server = fairshare_testkit::NatsServer::start_with_config(&config).unwrap();
    let seed = auth::seed_path(dir.path(), Role::Operator);
    let setup = async_nats::ConnectOptions::with_user_and_password("setup".into(), "setup".into())
        .connect(server.url())
        .await
        .unwrap();
    let js = async_nats::jetstream::new(setup);
    fairshare_runtime::nats::ensure_streams(&js, 1)
        .await
        .unwrap();
    let now = SystemClock.now_ms();
    let inventory = fairshare_model::files::parse_inventory(INVENTORY).unwrap();
    fairshare_runtime::admin::register_nodes(&js, now, inventory.registrations())
        .await
        .unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_fairshare"));
    command
        .args([
            "node",
            "cordon",
            "--nats-url",
            &server.url(),
            "--cluster",
            CLUSTER,
        ])
        .arg("--nats-nkey")
        .arg(&seed)
        .args(["gpu000", "gpu001", "gpu002"]);
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let said = stdout(&out);
    assert!(said.contains("gpu000: cordoned at sequence"), "{said}");
    assert!(said.contains("gpu002: cordoned at sequence"), "{said}");
    assert!(!said.contains("gpu001"), "{said}");
    let err = stderr(&out);
    assert!(err.contains("1 of 3 nodes not changed (gpu001: "), "{err}");
    assert!(err.contains("run the same command again"), "{err}");
    let cordoned: Vec<String> = fairshare_testkit::events::stored(&js)
        .await
        .into_iter()
        .filter_map(|s| match s.event.body? {
            Body::NodeCordoned(n) => Some(n.node),
            _ => None,
        })
        .collect();
    assert_eq!(cordoned, ["gpu000", "gpu002"]);

    let file = inventory_file(
        "[[nodes]]\nname = \"gpu001\"\ngpus = 16\n[[nodes]]\nname = \"gpu004\"\ngpus = 8\n",
    );
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_fairshare"));
    command
        .args([
            "inventory",
            "apply",
            "--nats-url",
            &server.url(),
            "--nats-nkey",
        ])
        .arg(&seed)
        .arg(file.path());
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("gpu004: registered with 8 GPUs"),
        "{}",
        stdout(&out)
    );
    assert!(
        stderr(&out).contains("1 of 2 nodes not changed (gpu001: "),
        "{}",
        stderr(&out)
    );
    let registered: Vec<(String, u32)> = fairshare_testkit::events::stored(&js)
        .await
        .into_iter()
        .filter_map(|s| match s.event.body? {
            Body::NodeRegistered(n) => Some((n.node, n.gpus)),
            _ => None,
        })
        .filter(|(node, _)| node == "gpu001" || node == "gpu004")
        .collect();
    assert_eq!(
        registered,
        [("gpu001".to_owned(), 8), ("gpu004".to_owned(), 8)]
    );
}
