//! `fairshare simulate ...` hands its arguments to the simulator binary as they are (its
//! `--help` too), calling it `fairshare simulate`, and exits with the simulator's status; a
//! simulator that cannot be run is a clear error. The simulator is named with `FAIRSHARE_SIM_BIN` here: a script that records
//! what it was given. (One test: a second one forking while this one writes its script could
//! make running the script fail with "text file busy".)

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

#[test]
fn arguments_and_exit_status_pass_through_and_a_missing_simulator_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let sim = dir.path().join("fake-sim");
    std::fs::write(
        &sim,
        "#!/bin/sh\necho \"given: $*\"\necho \"url: $FAIRSHARE_NATS_URL nkey: $FAIRSHARE_NATS_NKEY\"\nexit 3\n",
    )
    .unwrap();
    std::fs::set_permissions(&sim, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fairshare"))
        .args(["simulate", "trace", "--nodes", "4", "--help"])
        .env("FAIRSHARE_SIM_BIN", &sim)
        .env_remove("FAIRSHARE_NATS_URL")
        .env_remove("FAIRSHARE_NATS_NKEY")
        .env_remove("FAIRSHARE_NATS_CREDS")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "given: trace --nodes 4 --help\nurl: nats://127.0.0.1:4222 nkey: \n"
    );
    assert_eq!(out.status.code(), Some(3));

    // `fairshare`'s connection flags reach the simulator (its `load` reads them from the
    // environment), over whatever the environment said.
    let out = Command::new(env!("CARGO_BIN_EXE_fairshare"))
        .args([
            "--nats-url",
            "nats://lab:4222",
            "--nats-nkey",
            "/keys/operator.nk",
            "simulate",
            "load",
            "sim.log",
        ])
        .env("FAIRSHARE_SIM_BIN", &sim)
        .env("FAIRSHARE_NATS_URL", "nats://elsewhere:4222")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "given: load sim.log\nurl: nats://lab:4222 nkey: /keys/operator.nk\n"
    );

    // The simulator is called as `fairshare simulate`, so its usage lines and errors name
    // the command the operator typed (a shell given as the simulator prints its `$0`).
    let out = Command::new(env!("CARGO_BIN_EXE_fairshare"))
        .args(["simulate", "-c", "echo \"as: $0\""])
        .env("FAIRSHARE_SIM_BIN", "/bin/sh")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "as: fairshare simulate\n"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_fairshare"))
        .args(["simulate", "scenario", "--list"])
        .env("FAIRSHARE_SIM_BIN", dir.path().join("missing"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot run the simulator"), "{err}");
    assert!(err.contains("FAIRSHARE_SIM_BIN"), "{err}");
}
