//! Configuration of the usage fold.
//!
//! Place in the flow: chosen once when the service (or simulator) creates its fold; it must not
//! change between a checkpoint and the events folded after it, so it is part of the state.

use serde::{Deserialize, Serialize};

/// The default sliding window: 7 days, in ms (SPEC section 2).
pub const DEFAULT_WINDOW_MS: u64 = 7 * 24 * 3_600_000;

/// Longest window accepted: 10 years keeps every time difference far from `i64` limits.
pub const MAX_WINDOW_MS: u64 = 10 * 366 * 24 * 3_600_000;

/// Why a configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The window must be at least 1 ms and at most [`MAX_WINDOW_MS`].
    #[error("window of {window_ms} ms is out of range (1 ms to {MAX_WINDOW_MS} ms)")]
    WindowOutOfRange {
        /// The window asked for.
        window_ms: u64,
    },
}

/// How the fold measures usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawConfig", into = "RawConfig")]
pub struct FoldConfig {
    window_ms: u64,
}

/// The serialized form, validated on the way back in (a checkpoint is input too).
#[derive(Serialize, Deserialize)]
struct RawConfig {
    window_ms: u64,
}

impl TryFrom<RawConfig> for FoldConfig {
    type Error = ConfigError;

    fn try_from(raw: RawConfig) -> Result<FoldConfig, ConfigError> {
        FoldConfig::new(raw.window_ms)
    }
}

impl From<FoldConfig> for RawConfig {
    fn from(config: FoldConfig) -> RawConfig {
        RawConfig {
            window_ms: config.window_ms,
        }
    }
}

impl FoldConfig {
    /// A fold with a window of `window_ms`.
    pub fn new(window_ms: u64) -> Result<FoldConfig, ConfigError> {
        if window_ms == 0 || window_ms > MAX_WINDOW_MS {
            return Err(ConfigError::WindowOutOfRange { window_ms });
        }
        Ok(FoldConfig { window_ms })
    }

    /// The window length W, in ms.
    pub fn window_ms(&self) -> u64 {
        self.window_ms
    }

    /// The window as a signed time span (always fits: see [`MAX_WINDOW_MS`]).
    pub(crate) fn window(&self) -> i64 {
        i64::try_from(self.window_ms).unwrap_or(i64::MAX)
    }
}

impl Default for FoldConfig {
    fn default() -> FoldConfig {
        FoldConfig {
            window_ms: DEFAULT_WINDOW_MS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_bounds() {
        assert_eq!(FoldConfig::default().window_ms(), 604_800_000);
        assert!(FoldConfig::new(0).is_err());
        assert!(FoldConfig::new(MAX_WINDOW_MS + 1).is_err());
        assert_eq!(FoldConfig::new(1).map(|c| c.window()), Ok(1));
    }

    #[test]
    fn a_checkpointed_window_is_validated_again() {
        let bytes = bincode::serialize(&FoldConfig::default()).unwrap();
        let back: FoldConfig = bincode::deserialize(&bytes).unwrap();
        assert_eq!(back, FoldConfig::default());
        let zero = bincode::serialize(&RawConfig { window_ms: 0 }).unwrap();
        assert!(bincode::deserialize::<FoldConfig>(&zero).is_err());
    }
}
