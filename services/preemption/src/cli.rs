//! The preemption policy's command-line flags, shared by every binary that must decide as the
//! service does: the service itself, its `--audit`, and the operator CLI's `fairshare audit`.
//!
//! Place in the flow: parsed once at start-up into a [`domain::Config`]. An audit re-derives
//! orders only under the settings the service ran with, so the flags, their environment
//! fall-backs and their defaults must be the same everywhere: one definition keeps them so.

use std::time::Duration;

use fairshare_model::duration::parse_duration;

use crate::domain::{self, ConfigError};

/// Grace, protection cap, checkpoint interval, hysteresis and packing.
#[derive(Debug, Clone, clap::Args)]
pub struct PolicyArgs {
    /// Time between a preemption order and the moment the job counts as killed (e.g. 30s); an
    /// order that drains a node for a maintenance window is cut to end at the window's start.
    #[arg(long, env = "FAIRSHARE_GRACE", default_value = "30s", value_parser = parse_duration)]
    pub grace: Duration,
    /// Longest minimum runtime honoured (e.g. 8h). At least the submission service's
    /// --max-min-runtime (the same variable), or jobs it accepts are protected for less than
    /// they declared; the preemption service warns when it folds such a job.
    #[arg(long, env = "FAIRSHARE_MAX_MIN_RUNTIME", default_value = "8h", value_parser = parse_duration)]
    pub max_min_runtime: Duration,
    /// Jobs are assumed to checkpoint this often; work since then is lost on preemption.
    #[arg(long, env = "FAIRSHARE_CHECKPOINT_INTERVAL", default_value = "30m", value_parser = parse_duration)]
    pub checkpoint_interval: Duration,
    /// Hysteresis in per mille: how much worse the victim's side must rank than the waiter's
    /// after the waiter is charged.
    #[arg(long, env = "FAIRSHARE_HYSTERESIS_PER_MILLE", default_value_t = 100)]
    pub hysteresis_per_mille: u32,
    /// Packing moves: when no rule lets the first waiting job that cannot start take anyone's
    /// work, resumable single-node jobs past their minimum runtime may be moved off a node
    /// into free GPUs elsewhere so that it (or a single-node job behind it) fits there.
    /// `false` turns them off.
    #[arg(long, env = "FAIRSHARE_PACKING", default_value_t = true, action = clap::ArgAction::Set)]
    pub packing: bool,
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl PolicyArgs {
    /// The policy these flags name, checked.
    pub fn config(&self) -> Result<domain::Config, ConfigError> {
        let config = domain::Config {
            grace_ms: millis(self.grace),
            min_runtime_cap_ms: millis(self.max_min_runtime),
            checkpoint_interval_ms: millis(self.checkpoint_interval),
            hysteresis_permille: self.hysteresis_per_mille,
            packing: self.packing,
        };
        // Named as the operator gave them, not as the domain calls them.
        config.validate().map_err(|e| match e {
            ConfigError::NotPositive { name, value } => ConfigError::NotPositive {
                name: match name {
                    "min_runtime_cap_ms" => "--max-min-runtime",
                    "checkpoint_interval_ms" => "--checkpoint-interval",
                    other => other,
                },
                value,
            },
            other => other,
        })?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Wrapper {
        #[command(flatten)]
        policy: PolicyArgs,
    }

    #[test]
    fn the_defaults_are_the_services_defaults() {
        let parsed = Wrapper::try_parse_from(["x"]).unwrap();
        assert_eq!(parsed.policy.config().unwrap(), domain::Config::default());
    }

    #[test]
    fn flags_set_the_policy_and_a_zero_cap_is_refused() {
        let parsed = Wrapper::try_parse_from([
            "x",
            "--grace",
            "45s",
            "--checkpoint-interval",
            "1h",
            "--hysteresis-per-mille",
            "250",
            "--packing",
            "false",
        ])
        .unwrap();
        let config = parsed.policy.config().unwrap();
        assert_eq!(config.grace_ms, 45_000);
        assert_eq!(config.checkpoint_interval_ms, 3_600_000);
        assert_eq!(config.hysteresis_permille, 250);
        assert!(!config.packing);
        let zero = Wrapper::try_parse_from(["x", "--max-min-runtime", "0s"]).unwrap();
        assert!(matches!(
            zero.policy.config(),
            Err(ConfigError::NotPositive {
                name: "--max-min-runtime",
                ..
            })
        ));
        let zero = Wrapper::try_parse_from(["x", "--checkpoint-interval", "0s"]).unwrap();
        assert_eq!(
            zero.policy.config().unwrap_err().to_string(),
            "--checkpoint-interval must be positive (got 0 ms)"
        );
    }
}
