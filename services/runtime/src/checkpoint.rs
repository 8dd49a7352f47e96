//! The sled checkpoint a service keeps next to its fold: its state and the last stream
//! sequence applied, written together in one atomic insert.
//!
//! The checkpoint is only a cache. A missing one means "fold from the start"; an unreadable one
//! (corrupt bytes, another format version, another service's state) is reported and treated the
//! same way, so deleting the directory is always safe: the service rebuilds the identical state
//! from the log.

use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Key of the single checkpoint entry.
const KEY: &[u8] = b"checkpoint";
/// Leading bytes of every checkpoint value.
const MAGIC: &[u8; 4] = b"FSCP";
/// Header: magic, format version (u32), kind tag length (u16) and tag, sequence (u64).
const HEADER_FIXED: usize = 4 + 4 + 2 + 8;

/// Why a checkpoint could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The sled database failed.
    #[error("checkpoint store: {0}")]
    Store(#[from] sled::Error),
    /// The bytes are not a checkpoint this code wrote for this kind of state.
    #[error("unreadable checkpoint ({0}); it will be rebuilt from the log")]
    Corrupt(String),
    /// The state could not be encoded.
    #[error("cannot encode checkpoint: {0}")]
    Encode(String),
}

/// A decoded checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint<S> {
    /// The last stream sequence folded into `state`.
    pub sequence: u64,
    /// The folded state.
    pub state: S,
}

/// A folded state that can tell whether a checkpoint of it may be resumed.
pub trait Resumable {
    /// The last stream sequence folded into the state.
    fn last_applied(&self) -> u64;
    /// Whether the state was folded for `scope` (a cluster name).
    fn is_for(&self, scope: &str) -> bool;
}

/// One service's checkpoint store.
pub struct CheckpointStore {
    db: sled::Db,
    /// Names the state's type and format, so a checkpoint is never read as the wrong state.
    kind: String,
    /// Bumped when the state's encoding changes; older checkpoints are then rebuilt.
    version: u32,
}

impl CheckpointStore {
    /// Opens (or creates) the store in `dir` for states tagged `kind` at format `version`.
    pub fn open(dir: &Path, kind: &str, version: u32) -> Result<Self, CheckpointError> {
        let db = sled::Config::new().path(dir).open()?;
        Ok(Self {
            db,
            kind: kind.to_owned(),
            version,
        })
    }

    /// The checkpoint, `None` if there is none.
    pub fn load<S: DeserializeOwned>(&self) -> Result<Option<Checkpoint<S>>, CheckpointError> {
        let Some(bytes) = self.db.get(KEY)? else {
            return Ok(None);
        };
        let corrupt = |what: &str| CheckpointError::Corrupt(what.to_owned());
        if bytes.len() < HEADER_FIXED || &bytes[..4] != MAGIC {
            return Err(corrupt("bad header"));
        }
        let version = u32::from_be_bytes(bytes[4..8].try_into().map_err(|_| corrupt("version"))?);
        if version != self.version {
            return Err(corrupt(&format!(
                "format {version}, expected {}",
                self.version
            )));
        }
        let tag_len = usize::from(u16::from_be_bytes(
            bytes[8..10].try_into().map_err(|_| corrupt("tag"))?,
        ));
        let tag_end = 10 + tag_len;
        if bytes.len() < tag_end + 8 || &bytes[10..tag_end] != self.kind.as_bytes() {
            return Err(corrupt("written for another kind of state"));
        }
        let sequence = u64::from_be_bytes(
            bytes[tag_end..tag_end + 8]
                .try_into()
                .map_err(|_| corrupt("sequence"))?,
        );
        let state =
            bincode::deserialize(&bytes[tag_end + 8..]).map_err(|e| corrupt(&e.to_string()))?;
        Ok(Some(Checkpoint { sequence, state }))
    }

    /// The checkpointed state if it can be resumed: readable, folded for `scope`, and at the
    /// sequence it was saved with. Anything else is reported and `None` returned, so the caller
    /// folds the log from the start.
    pub fn resume<S: DeserializeOwned + Resumable>(&self, scope: &str) -> Option<S> {
        match self.load::<S>() {
            Ok(Some(cp)) if cp.state.is_for(scope) && cp.state.last_applied() == cp.sequence => {
                tracing::info!(scope, sequence = cp.sequence, "resuming from checkpoint");
                Some(cp.state)
            }
            Ok(Some(cp)) => {
                tracing::warn!(
                    scope,
                    sequence = cp.sequence,
                    "checkpoint is not for this scope or not at its own sequence; rebuilding from the log"
                );
                None
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(scope, "{e}");
                None
            }
        }
    }

    /// Replaces the checkpoint with `state` at `sequence`, atomically, and waits until it is on
    /// disk.
    pub fn save<S: Serialize>(&self, sequence: u64, state: &S) -> Result<(), CheckpointError> {
        let tag = self.kind.as_bytes();
        let tag_len = u16::try_from(tag.len())
            .map_err(|_| CheckpointError::Encode("kind tag too long".into()))?;
        let body = bincode::serialize(state).map_err(|e| CheckpointError::Encode(e.to_string()))?;
        let mut value = Vec::with_capacity(HEADER_FIXED + tag.len() + body.len());
        value.extend_from_slice(MAGIC);
        value.extend_from_slice(&self.version.to_be_bytes());
        value.extend_from_slice(&tag_len.to_be_bytes());
        value.extend_from_slice(tag);
        value.extend_from_slice(&sequence.to_be_bytes());
        value.extend_from_slice(&body);
        self.db.insert(KEY, value)?;
        self.db.flush()?;
        Ok(())
    }

    /// Removes the checkpoint (the next start folds from the beginning).
    pub fn clear(&self) -> Result<(), CheckpointError> {
        self.db.remove(KEY)?;
        self.db.flush()?;
        Ok(())
    }

    /// Overwrites the checkpoint with raw bytes; for tests of the corrupt-checkpoint path.
    #[doc(hidden)]
    pub fn write_raw(&self, bytes: &[u8]) -> Result<(), CheckpointError> {
        self.db.insert(KEY, bytes)?;
        self.db.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct State {
        usage: Vec<(String, u64)>,
    }

    #[test]
    fn round_trip_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let state = State {
            usage: vec![("a/b".into(), 42)],
        };
        {
            let store = CheckpointStore::open(dir.path(), "test", 1).unwrap();
            assert_eq!(store.load::<State>().unwrap(), None);
            store.save(7, &state).unwrap();
        }
        let store = CheckpointStore::open(dir.path(), "test", 1).unwrap();
        assert_eq!(
            store.load::<State>().unwrap(),
            Some(Checkpoint { sequence: 7, state })
        );
        store.clear().unwrap();
        assert_eq!(store.load::<State>().unwrap(), None);
    }

    #[test]
    fn foreign_or_corrupt_checkpoints_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = CheckpointStore::open(dir.path(), "test", 1).unwrap();
            store.save(7, &State { usage: vec![] }).unwrap();
        }
        let other_kind = CheckpointStore::open(dir.path(), "other", 1).unwrap();
        assert!(matches!(
            other_kind.load::<State>(),
            Err(CheckpointError::Corrupt(_))
        ));
        drop(other_kind);
        let newer = CheckpointStore::open(dir.path(), "test", 2).unwrap();
        assert!(matches!(
            newer.load::<State>(),
            Err(CheckpointError::Corrupt(_))
        ));
        newer.write_raw(b"FSCP garbage").unwrap();
        drop(newer);
        let store = CheckpointStore::open(dir.path(), "test", 1).unwrap();
        assert!(matches!(
            store.load::<State>(),
            Err(CheckpointError::Corrupt(_))
        ));
    }
}
