//! `fairshare budget diff FILE` against a real nats-server holding the test cluster's budget
//! tree: each allocation's share in force and in the file, new and removed ones marked, and
//! nothing written; a file equal to the tree in force says nothing changes.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::Output;

use fairshare_e2e::{BUDGET, Stack};
use fairshare_events::pb::event::Body;

async fn diff(stack: &Stack, budget: &str) -> Output {
    budget_command(stack, "diff", budget, &[]).await
}

/// Runs `fairshare budget <verb> FILE <extra>` with `budget` as the file.
async fn budget_command(stack: &Stack, verb: &str, budget: &str, extra: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("budget.toml");
    std::fs::write(&file, budget).unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_fairshare"));
    command
        .args(["budget", verb, "--nats-url", &stack.server.url()])
        .arg(&file)
        .args(extra);
    tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap()
}

/// `budget diff` names the sequence of the tree it compared against; `budget apply
/// --expect-sequence` with it writes, and refuses once another change landed in between.
#[tokio::test]
async fn an_apply_held_to_the_diffs_tree_refuses_a_change_made_since() {
    let stack = Stack::start().await.unwrap();
    let ours = BUDGET.replace("share = 1", "share = 2");
    assert_ne!(ours, BUDGET);
    let shown = diff(&stack, &ours).await;
    let text = String::from_utf8_lossy(&shown.stdout).into_owned();
    let seq: u64 = text
        .split("since sequence ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    // Another manager applies their tree first.
    let theirs = BUDGET.replace("share = 3", "share = 5");
    let first = budget_command(&stack, "apply", &theirs, &[]).await;
    assert!(first.status.success(), "{first:?}");
    let before = stack.event_count().await.unwrap();
    let stale = budget_command(
        &stack,
        "apply",
        &ours,
        &["--expect-sequence", &seq.to_string()],
    )
    .await;
    assert!(!stale.status.success());
    assert!(
        String::from_utf8_lossy(&stale.stderr).contains(&format!(
            "the cluster's policy subject moved past sequence {seq}: the tree changed since you \
             looked"
        )),
        "{stale:?}"
    );
    assert_eq!(
        stack.event_count().await.unwrap(),
        before,
        "nothing written"
    );
    // And no table of shares as if it had been applied.
    assert!(
        !String::from_utf8_lossy(&stale.stdout).contains("allocations"),
        "{stale:?}"
    );
    // Against the tree now in force it goes through, and says what it replaced.
    let now = before;
    let applied = budget_command(
        &stack,
        "apply",
        &ours,
        &["--expect-sequence", &now.to_string()],
    )
    .await;
    assert!(applied.status.success(), "{applied:?}");
    assert!(
        String::from_utf8_lossy(&applied.stdout)
            .contains(&format!("replaces the tree of sequence {now}")),
        "{applied:?}"
    );
    assert!(
        String::from_utf8_lossy(&applied.stdout).contains("allocations"),
        "the tree applied is shown: {applied:?}"
    );
    assert_eq!(stack.event_count().await.unwrap(), before + 1);
    // The same command run again (its acknowledgement lost, say) finds its own tree in
    // force: nothing written, and no claim that the tree changed since.
    let again = budget_command(
        &stack,
        "apply",
        &ours,
        &["--expect-sequence", &now.to_string()],
    )
    .await;
    assert!(again.status.success(), "{again:?}");
    assert_eq!(stack.event_count().await.unwrap(), before + 1);
}

#[tokio::test]
async fn a_budget_change_is_shown_against_the_tree_in_force_and_nothing_is_written() {
    let stack = Stack::start().await.unwrap();
    let before = stack.event_count().await.unwrap();
    // In force: research 3 (nlp 1, vision 3), infra 1. The file: research 1 (nlp 1, vision 1),
    // infra 1, ops 2; so nlp 18.75% -> 12.5%, vision 56.25% -> 12.5%, infra 25% -> 25%, ops new.
    let file = r#"
cluster = "alpha"
[accounts.research]
share = 1
[accounts.research.nlp]
share = 1
[accounts.research.vision]
share = 1
[accounts.infra]
share = 1
[accounts.ops]
share = 2
"#;
    let out = diff(&stack, file).await;
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |path: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(&format!("{path} ")))
            .unwrap_or_else(|| panic!("no line for {path} in {text}"))
            .to_owned()
    };
    assert!(
        line("research/nlp").contains("18.750% ->   12.500%  (-6.250 points)"),
        "{text}"
    );
    assert!(
        line("research/vision").contains("56.250% ->   12.500%  (-43.750 points)"),
        "{text}"
    );
    assert!(line("infra").contains("25.000% ->   25.000%"), "{text}");
    assert!(!line("infra").contains("points"), "{text}");
    assert!(line("ops").ends_with("(new)"), "{text}");
    assert_eq!(
        stack.event_count().await.unwrap(),
        before,
        "nothing written"
    );

    // The tree in force itself: nothing changes.
    let same = diff(&stack, BUDGET).await;
    assert!(
        String::from_utf8_lossy(&same.stdout).contains("no account's share changes"),
        "{same:?}"
    );
    // Every share doubled: no fraction moves, but the tree is another one, which apply writes.
    let doubled: String = BUDGET
        .lines()
        .map(|l| match l.trim().strip_prefix("share = ") {
            Some(n) => format!("share = {}\n", 2 * n.parse::<u64>().unwrap()),
            None => format!("{l}\n"),
        })
        .collect();
    let scaled = diff(&stack, &doubled).await;
    let text = String::from_utf8_lossy(&scaled.stdout);
    assert!(
        text.contains("no allocation's share of the cluster changes, but account shares do"),
        "{scaled:?}"
    );
    assert!(!text.contains("points"), "{text}");
    // infra removed: its live work is asked of the accounting service, which does not run
    // here, and the diff says it could not ask rather than saying nothing.
    let without_infra = BUDGET.replace("[accounts.infra]\nshare = 1\n", "");
    assert_ne!(without_infra, BUDGET);
    let removed = diff(&stack, &without_infra).await;
    let text = String::from_utf8_lossy(&removed.stdout);
    assert!(
        text.contains("(removed: no claim on the cluster any more)"),
        "{text}"
    );
    assert!(
        text.contains("(could not ask about live work of the removed allocations: nothing answers"),
        "{text}"
    );
    // With the accounting service up and a job of infra running, the diff says what becomes
    // of it.
    let dir = tempfile::tempdir().unwrap();
    let accounting = stack
        .serve_accounting(dir.path().to_path_buf())
        .await
        .unwrap();
    let spec = fairshare_events::pb::JobSpec {
        cluster: fairshare_e2e::CLUSTER.into(),
        allocation: "infra".into(),
        gpus: 2,
        min_runtime_s: 600,
        ..Default::default()
    };
    let job = "0190c0de-0000-7000-8000-000000000001";
    for (kind, body) in [
        (
            "job_submitted",
            Body::JobSubmitted(fairshare_events::pb::JobSubmitted {
                job_id: job.into(),
                idempotency_key: "infra-run".into(),
                spec: Some(spec),
                shape: Some(fairshare_events::pb::Shape {
                    nodes: 1,
                    gpus_per_node: 2,
                }),
            }),
        ),
        // Accounting charges a start only for a placed job.
        (
            "job_placed",
            fairshare_testkit::events::placed_on(job, "n1", 2),
        ),
        (
            "job_started",
            Body::JobStarted(fairshare_events::pb::JobStarted { job_id: job.into() }),
        ),
    ] {
        let subject = fairshare_events::subjects::job_event(fairshare_e2e::CLUSTER, job, kind);
        stack
            .append(subject, body, &format!("{job}-{kind}"))
            .await
            .unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let said = loop {
        let out = diff(&stack, &without_infra).await;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains("infra: its allocated jobs run on 2 GPUs and wait for 0 GPUs now") {
            break text;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(
        said.contains("its waiting jobs (unallocated ones too) start nowhere"),
        "{said}"
    );
    // Applied without a diff first, the tree is written and the same is said, as a warning.
    let applied = budget_command(&stack, "apply", &without_infra, &[]).await;
    assert!(applied.status.success(), "{applied:?}");
    let warned = String::from_utf8_lossy(&applied.stderr);
    assert!(
        warned.contains("warning:  infra: its allocated jobs run on 2 GPUs"),
        "{warned}"
    );
    accounting.abort();
    // An invalid file is refused before anything is read or written.
    let bad = diff(&stack, "cluster = \"alpha\"\n[accounts.a]\nshare = -1\n").await;
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("refused"),
        "{bad:?}"
    );
}

/// A budget or inventory file naming a cluster the log knows nothing of (a typo) is refused,
/// nothing written, unless `--new-cluster` says it is meant; an inventory for it then makes it
/// known, so its budget needs no flag.
#[tokio::test]
async fn a_file_for_a_cluster_the_log_does_not_know_is_refused_unless_new() {
    let stack = Stack::start().await.unwrap();
    let events = || async { stack.all_events().await.unwrap().len() };
    let before = events().await;
    let typo = BUDGET.replace("cluster = \"alpha\"", "cluster = \"aplha\"");
    let refused = budget_command(&stack, "apply", &typo, &[]).await;
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("\"aplha\" has no budget tree and no nodes")
            && stderr.contains("--new-cluster")
            && stderr.contains("nothing written"),
        "{stderr}"
    );
    assert_eq!(events().await, before);

    let dir = tempfile::tempdir().unwrap();
    let inventory = dir.path().join("inventory.toml");
    std::fs::write(
        &inventory,
        "cluster = \"beta\"\n[[nodes]]\nprefix = \"gpu\"\ncount = 1\ngpus = 8\n",
    )
    .unwrap();
    let apply = |extra: &'static [&'static str]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_fairshare"));
        command
            .args(["inventory", "apply", "--nats-url", &stack.server.url()])
            .args(extra)
            .arg(&inventory);
        tokio::task::spawn_blocking(move || command.output())
    };
    let refused = apply(&[]).await.unwrap().unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert_eq!(events().await, before);
    let applied = apply(&["--new-cluster"]).await.unwrap().unwrap();
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    assert_eq!(events().await, before + 1);
    let beta = BUDGET.replace("cluster = \"alpha\"", "cluster = \"beta\"");
    let known = budget_command(&stack, "apply", &beta, &[]).await;
    assert!(
        known.status.success(),
        "{}",
        String::from_utf8_lossy(&known.stderr)
    );
    assert_eq!(events().await, before + 2);
}

/// An entry on the policy subject that is no valid tree (written past the CLI, or by another
/// version) is refused by the services, which keep the tree before it: `budget diff` compares
/// against that tree too, says why it passed over the newest entry, and names the subject's
/// newest sequence for `--expect-sequence`, with which `budget apply` then writes. Before,
/// both failed on the entry until someone wrote a tree past them.
#[tokio::test]
async fn an_unusable_newest_tree_is_passed_over_as_the_services_do() {
    use fairshare_events::pb;
    let stack = Stack::start().await.unwrap();
    let before = stack.event_count().await.unwrap();
    let refused = stack
        .append(
            fairshare_events::subjects::policy(fairshare_e2e::CLUSTER),
            Body::BudgetTreeSet(pb::BudgetTreeSet {
                cluster: fairshare_e2e::CLUSTER.into(),
                accounts: Vec::new(),
            }),
            "empty-tree",
        )
        .await
        .unwrap();
    let ours = BUDGET.replace("share = 1", "share = 2");
    let shown = diff(&stack, &ours).await;
    assert!(shown.status.success(), "{shown:?}");
    let out = String::from_utf8_lossy(&shown.stdout).into_owned();
    let err = String::from_utf8_lossy(&shown.stderr).into_owned();
    assert!(
        err.contains(&format!("(sequence {refused}) is not a usable budget tree")),
        "{err}"
    );
    // The tree in force is the one Stack::start set (its first entry), not the empty one.
    assert!(
        out.contains("against the tree in force since sequence 1 "),
        "{out}"
    );
    assert!(
        out.contains(&format!("--expect-sequence {refused}`")),
        "{out}"
    );
    assert!(out.contains("infra"), "{out}");
    assert_eq!(stack.event_count().await.unwrap(), before + 1);

    let applied = budget_command(
        &stack,
        "apply",
        &ours,
        &["--expect-sequence", &refused.to_string()],
    )
    .await;
    assert!(applied.status.success(), "{applied:?}");
    assert_eq!(stack.event_count().await.unwrap(), before + 2);
}
