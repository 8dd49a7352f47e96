//! `fairshare-preemption --audit` into a reader that is already gone ends quietly with status
//! 141, as `fairshare audit` does, not with a panic.

#[tokio::test]
async fn audit_into_a_closed_pipe_exits_quietly() {
    fairshare_testkit::assert_audit_into_closed_pipe_exits_quietly(env!(
        "CARGO_BIN_EXE_fairshare-preemption"
    ))
    .await;
}
