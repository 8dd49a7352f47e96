//! `fairshare simulate ...` hands its arguments to the simulator binary as they are (its
//! `--help` too) and exits with the simulator's status; a simulator that cannot be run is a
//! clear error. The simulator is named with `FAIRSHARE_SIM_BIN` here: a script that records
//! what it was given. (One test: a second one forking while this one writes its script could
//! make running the script fail with "text file busy".)

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

#[test]
fn arguments_and_exit_status_pass_through_and_a_missing_simulator_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let sim = dir.path().join("fake-sim");
    std::fs::write(&sim, "#!/bin/sh\necho \"given: $*\"\nexit 3\n").unwrap();
    std::fs::set_permissions(&sim, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fairshare"))
        .args(["simulate", "trace", "--nodes", "4", "--help"])
        .env("FAIRSHARE_SIM_BIN", &sim)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "given: trace --nodes 4 --help\n"
    );
    assert_eq!(out.status.code(), Some(3));

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
