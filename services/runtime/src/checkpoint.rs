//! The sled checkpoint a service keeps next to its fold: its state and the last stream
//! sequence applied, written together in one atomic insert, under a CRC-32 of both.
//!
//! The checkpoint is only a cache. A missing one means "fold from the start"; an unreadable one
//! (corrupt bytes, another format version, another service's state) is reported and treated the
//! same way, so deleting the directory is always safe: the service rebuilds the identical state
//! from the log.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Key of the single checkpoint entry.
const KEY: &[u8] = b"checkpoint";

/// Key of the instance's name beside the checkpoint ([`CheckpointStore::instance_token`]).
const INSTANCE_KEY: &[u8] = b"instance";
/// Leading bytes of every checkpoint value.
const MAGIC: &[u8; 4] = b"FSC3";
/// Leading bytes of the checkpoints of releases before the checksum (`FSCP`) and before the
/// stored time (`FSC2`): rebuilt once.
const MAGIC_OLDER: [&[u8; 4]; 2] = [b"FSCP", b"FSC2"];
/// Header: magic, CRC-32 of everything after it (u32), format version (u32), kind tag length
/// (u16) and tag, sequence (u64), the time the stream stored the entry at that sequence (i64
/// Unix ms; `i64::MIN` when unknown).
const HEADER_FIXED: usize = 4 + 4 + 4 + 2 + 8 + 8;
/// The stored time of a checkpoint saved without one.
const UNKNOWN_STORED: i64 = i64::MIN;
/// Where the bytes the checksum covers begin.
const CHECKED_FROM: usize = 8;
/// How long [`CheckpointStore::open`] waits for a directory whose lock is still held. sled's
/// background threads keep a dropped store's lock for a moment, so a service restarted in the
/// same process (or a process restarted right after its predecessor exited) must wait for it;
/// a lock held longer than this belongs to a live process.
pub const LOCK_WAIT: Duration = Duration::from_secs(3);
/// Pause between attempts to take a held lock.
const LOCK_RETRY: Duration = Duration::from_millis(20);

/// Why a checkpoint could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The sled database failed.
    #[error("checkpoint store: {0}")]
    Store(#[from] sled::Error),
    /// Another store (most likely another running instance of the same service) holds the
    /// directory.
    #[error(
        "checkpoint directory {} is in use (by another instance of this service?); each instance \
         needs its own",
        dir.display()
    )]
    Locked {
        /// The directory whose lock could not be taken.
        dir: PathBuf,
    },
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
    /// When the stream stored the entry at `sequence` (Unix ms), if the saver knew it: a log
    /// that holds another entry there (restored from a backup, or a server that lost its
    /// newest entries and wrote new ones under their sequences, keeping its creation time) is
    /// not the log the state was folded from.
    pub stored_ms: Option<i64>,
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
    /// Opens (or creates) the store in `dir` for states tagged `kind` at format `version`,
    /// waiting up to [`LOCK_WAIT`] for a lock still held by a store being closed. The wait
    /// blocks the calling thread; services open their store once, at start.
    pub fn open(dir: &Path, kind: &str, version: u32) -> Result<Self, CheckpointError> {
        Self::open_waiting(dir, kind, version, LOCK_WAIT)
    }

    /// [`CheckpointStore::open`] with its own bound on the wait for a held lock.
    pub fn open_waiting(
        dir: &Path,
        kind: &str,
        version: u32,
        wait: Duration,
    ) -> Result<Self, CheckpointError> {
        let deadline = Instant::now() + wait;
        let mut moved_aside = false;
        let db = loop {
            match sled::Config::new().path(dir).open() {
                Ok(db) => break db,
                Err(e) if is_lock_held(&e) => {
                    if Instant::now() >= deadline {
                        return Err(CheckpointError::Locked {
                            dir: dir.to_owned(),
                        });
                    }
                    std::thread::sleep(LOCK_RETRY);
                }
                // A database sled cannot read (torn by a power loss, written by another
                // version) is a cache lost, not a reason to stop serving: it is kept aside
                // for a post-mortem and the state is rebuilt from the log. Once only: a
                // fresh directory that fails too is a real problem (disk, permissions).
                Err(e) if is_unreadable(&e) && !moved_aside => {
                    // sled reads its config before it takes its lock: a live store may answer
                    // this way too (another process mid-creation), and must not be moved.
                    if lock_is_held(dir) {
                        return Err(CheckpointError::Locked {
                            dir: dir.to_owned(),
                        });
                    }
                    let aside = set_aside(dir).map_err(sled::Error::Io)?;
                    tracing::warn!(
                        dir = %dir.display(),
                        aside = %aside.display(),
                        "checkpoint store unreadable ({e}); moved aside, rebuilding from the log"
                    );
                    moved_aside = true;
                }
                Err(e) => return Err(e.into()),
            }
        };
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
        if MAGIC_OLDER.iter().any(|m| bytes.starts_with(*m)) {
            return Err(corrupt("written by an older release"));
        }
        if bytes.len() < HEADER_FIXED || &bytes[..4] != MAGIC {
            return Err(corrupt("bad header"));
        }
        // Damage that still decodes (a flipped bit in a count or an index) would otherwise be
        // resumed as state: every fold trusts its own checkpoint's links.
        let stored_crc = u32::from_be_bytes(bytes[4..8].try_into().map_err(|_| corrupt("crc"))?);
        if crc32fast::hash(&bytes[CHECKED_FROM..]) != stored_crc {
            return Err(corrupt("checksum mismatch: the bytes were damaged"));
        }
        let version = u32::from_be_bytes(bytes[8..12].try_into().map_err(|_| corrupt("version"))?);
        if version != self.version {
            return Err(corrupt(&format!(
                "format {version}, expected {}",
                self.version
            )));
        }
        let tag_len = usize::from(u16::from_be_bytes(
            bytes[12..14].try_into().map_err(|_| corrupt("tag"))?,
        ));
        let tag_end = 14 + tag_len;
        if bytes.len() < tag_end + 16 || &bytes[14..tag_end] != self.kind.as_bytes() {
            return Err(corrupt("written for another kind of state"));
        }
        let sequence = u64::from_be_bytes(
            bytes[tag_end..tag_end + 8]
                .try_into()
                .map_err(|_| corrupt("sequence"))?,
        );
        let stored = i64::from_be_bytes(
            bytes[tag_end + 8..tag_end + 16]
                .try_into()
                .map_err(|_| corrupt("stored time"))?,
        );
        let stored_ms = (stored != UNKNOWN_STORED).then_some(stored);
        let state =
            bincode::deserialize(&bytes[tag_end + 16..]).map_err(|e| corrupt(&e.to_string()))?;
        Ok(Some(Checkpoint {
            sequence,
            stored_ms,
            state,
        }))
    }

    /// The checkpointed state if it can be resumed: readable, folded for `scope`, at the
    /// sequence it was saved with, and not past `log_end`, the log's last sequence now (a
    /// checkpoint past it belongs to another incarnation of the stream, say a server whose
    /// store was wiped or a stream restored from an older backup: resumed, it would skip the
    /// new log's first entries as folded). Anything else is reported, removed
    /// ([`CheckpointStore::discard`]), and `None` returned, so the caller folds the log from
    /// the start.
    pub fn resume<S: DeserializeOwned + Resumable>(&self, scope: &str, log_end: u64) -> Option<S> {
        let cp = self.resume_checkpoint(scope, log_end)?;
        tracing::info!(scope, sequence = cp.sequence, "resuming from checkpoint");
        Some(cp.state)
    }

    /// [`CheckpointStore::resume`], and then only if the log `js` reads still holds, at the
    /// checkpoint's sequence, the entry it was folded from (stored at the time the checkpoint
    /// names): a log restored from a backup, or a single server that lost its newest entries
    /// in a power cut (JetStream writes to disk every few minutes by default) and took new ones
    /// under their sequences, keeps its creation time, and once it has grown past the
    /// checkpoint again, resuming would take entries the log no longer has as folded and skip
    /// the new ones. A log that cannot be asked is trusted (with a warning); a checkpoint
    /// saved without a stored time is resumed as before. Returns the state and that time.
    pub async fn resume_on_log<S: DeserializeOwned + Resumable>(
        &self,
        scope: &str,
        log_end: u64,
        js: &async_nats::jetstream::Context,
    ) -> Option<(S, Option<i64>)> {
        let cp = self.resume_checkpoint::<S>(scope, log_end)?;
        if !folded_from_this_log(js, scope, cp.sequence, cp.stored_ms).await {
            self.discard();
            return None;
        }
        tracing::info!(scope, sequence = cp.sequence, "resuming from checkpoint");
        Some((cp.state, cp.stored_ms))
    }

    /// The checks of [`CheckpointStore::resume`], keeping the checkpoint whole.
    fn resume_checkpoint<S: DeserializeOwned + Resumable>(
        &self,
        scope: &str,
        log_end: u64,
    ) -> Option<Checkpoint<S>> {
        match self.load::<S>() {
            Ok(Some(cp)) if cp.state.is_for(scope) && cp.state.last_applied() == cp.sequence => {
                if cp.sequence > log_end {
                    tracing::warn!(
                        scope,
                        checkpoint = cp.sequence,
                        log_end,
                        "checkpoint is ahead of the log; rebuilding from the log"
                    );
                    self.discard();
                    return None;
                }
                Some(cp)
            }
            Ok(Some(cp)) => {
                tracing::warn!(
                    scope,
                    sequence = cp.sequence,
                    "checkpoint is not for this scope or not at its own sequence; rebuilding from the log"
                );
                self.discard();
                None
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(scope, "{e}");
                self.discard();
                None
            }
        }
    }

    /// Removes a checkpoint the service refused, reporting a failure to. Left in place, one
    /// refused for being ahead of the log would be resumed at a later start once the log has
    /// grown past it (the service writes its own only once its fold moves), skipping the
    /// entries in between as folded.
    pub fn discard(&self) {
        if let Err(e) = self.clear() {
            tracing::warn!("cannot remove the refused checkpoint: {e}");
        }
    }

    /// Replaces the checkpoint with `state` at `sequence`, atomically, and waits until it is on
    /// disk. Without the entry's stored time, which a resume then cannot check: services use
    /// [`CheckpointStore::save_at`]; this is for tests.
    #[doc(hidden)]
    pub fn save<S: Serialize>(&self, sequence: u64, state: &S) -> Result<(), CheckpointError> {
        self.save_at(sequence, None, state)
    }

    /// [`CheckpointStore::save`], with the time the stream stored the entry at `sequence`
    /// (Unix ms), which [`CheckpointStore::resume_on_log`] checks the log against.
    pub fn save_at<S: Serialize>(
        &self,
        sequence: u64,
        stored_ms: Option<i64>,
        state: &S,
    ) -> Result<(), CheckpointError> {
        let tag = self.kind.as_bytes();
        let tag_len = u16::try_from(tag.len())
            .map_err(|_| CheckpointError::Encode("kind tag too long".into()))?;
        let body = bincode::serialize(state).map_err(|e| CheckpointError::Encode(e.to_string()))?;
        let mut value = Vec::with_capacity(HEADER_FIXED + tag.len() + body.len());
        value.extend_from_slice(MAGIC);
        value.extend_from_slice(&[0; 4]);
        value.extend_from_slice(&self.version.to_be_bytes());
        value.extend_from_slice(&tag_len.to_be_bytes());
        value.extend_from_slice(tag);
        value.extend_from_slice(&sequence.to_be_bytes());
        value.extend_from_slice(&stored_ms.unwrap_or(UNKNOWN_STORED).to_be_bytes());
        value.extend_from_slice(&body);
        let crc = crc32fast::hash(&value[CHECKED_FROM..]);
        value[4..CHECKED_FROM].copy_from_slice(&crc.to_be_bytes());
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

    /// A random name for the instance that keeps this store, made at its first use and kept
    /// beside the checkpoint (not removed with it): a restart on the same directory has the
    /// same one, an instance on another machine with a directory of the same path another
    /// ([`crate::lease::holder_for`]).
    pub fn instance_token(&self) -> Result<String, CheckpointError> {
        if let Some(token) = self.db.get(INSTANCE_KEY)? {
            return Ok(String::from_utf8_lossy(&token).into_owned());
        }
        let token = uuid::Uuid::now_v7().simple().to_string();
        self.db.insert(INSTANCE_KEY, token.as_bytes())?;
        self.db.flush()?;
        Ok(token)
    }

    /// Forgets the instance's name ([`CheckpointStore::instance_token`]): the next start on
    /// this directory is another instance, which waits for this one's lease to run out rather
    /// than take it back at once. For a stop that leaves writes of unknown outcome behind.
    pub fn forget_instance_token(&self) -> Result<(), CheckpointError> {
        self.db.remove(INSTANCE_KEY)?;
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

/// Whether the log `js` reads holds, at `sequence`, the entry a checkpoint of `scope` was folded
/// through, stored at `stored_ms` (see [`CheckpointStore::resume_on_log`]). True without a
/// stored time to check, when the log cannot be asked (said in a warning), or when only the
/// log's front was cut away past it ([`crate::log::still_the_same_log`]); false, said too, when
/// the log holds another entry there, or ends before it.
pub async fn folded_from_this_log(
    js: &async_nats::jetstream::Context,
    scope: &str,
    sequence: u64,
    stored_ms: Option<i64>,
) -> bool {
    let Some(stored_ms) = stored_ms else {
        return true;
    };
    match crate::log::still_holds(js, sequence, stored_ms).await {
        Ok(true) => true,
        Ok(false) => {
            tracing::warn!(
                scope,
                checkpoint = sequence,
                folded_entry_stored_ms = stored_ms,
                "the log holds another entry (or none) at the checkpoint's sequence than the one \
                 folded (restored from a backup, or entries lost and written anew); rebuilding \
                 from the log"
            );
            false
        }
        Err(e) => {
            tracing::warn!(
                scope,
                checkpoint = sequence,
                "cannot read the log's entry at the checkpoint's sequence ({e}); resuming without \
                 checking it"
            );
            true
        }
    }
}

/// Whether sled found the database itself unreadable (as opposed to the disk or the
/// directory's permissions failing).
fn is_unreadable(e: &sled::Error) -> bool {
    matches!(
        e,
        sled::Error::Corruption { .. } | sled::Error::Unsupported(_)
    )
}

/// Whether another process holds the lock sled takes on the store's `db` file (an exclusive
/// `flock`, which `File::try_lock` takes the same way).
fn lock_is_held(dir: &Path) -> bool {
    let Ok(file) = std::fs::File::open(dir.join("db")) else {
        return false;
    };
    matches!(file.try_lock(), Err(std::fs::TryLockError::WouldBlock))
}

/// Prefix of the folder inside a store's directory that an unreadable store's files are moved
/// into when the directory itself cannot be moved ([`set_aside`]).
const ASIDE_INSIDE: &str = "unreadable-";

/// Moves the unreadable store in `dir` out of sled's way, keeping it for a post-mortem, and
/// says where it went: beside `dir` as `<dir>.unreadable-<unix seconds>`, or, when `dir`
/// cannot be renamed (a volume's mount point, as a container's data directory often is),
/// into `<dir>/unreadable-<unix seconds>/`, which sled does not read. Either way `dir` is then
/// empty of sled's files and opens as a new store.
fn set_aside(dir: &Path) -> std::io::Result<PathBuf> {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let name = dir
        .file_name()
        .map_or_else(|| "checkpoint".into(), |n| n.to_string_lossy());
    let beside = dir.with_file_name(format!("{name}.unreadable-{seconds}"));
    match std::fs::rename(dir, &beside) {
        Ok(()) => Ok(beside),
        Err(beside_error) => {
            let inside = dir.join(format!("{ASIDE_INSIDE}{seconds}"));
            move_contents_into(dir, &inside).map_err(|inside_error| {
                std::io::Error::new(
                    inside_error.kind(),
                    format!(
                        "cannot move the unreadable store aside: renaming {} to {} failed \
                         ({beside_error}), and moving its files into {} failed ({inside_error})",
                        dir.display(),
                        beside.display(),
                        inside.display()
                    ),
                )
            })?;
            Ok(inside)
        }
    }
}

/// Moves every entry of `dir` into its new subfolder `inside`, except earlier set-aside
/// folders (renames within one directory: the same file system, so nothing is copied).
fn move_contents_into(dir: &Path, inside: &Path) -> std::io::Result<()> {
    std::fs::create_dir(inside)?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let earlier_aside = entry
            .file_name()
            .to_string_lossy()
            .starts_with(ASIDE_INSIDE)
            && entry.file_type()?.is_dir();
        if path == inside || earlier_aside {
            continue;
        }
        std::fs::rename(&path, inside.join(entry.file_name()))?;
    }
    Ok(())
}

/// Whether sled refused to open because another store holds the directory's lock. sled reports
/// it only as an I/O error with this message (sled 0.34, `config.rs`).
fn is_lock_held(e: &sled::Error) -> bool {
    matches!(e, sled::Error::Io(io) if io.to_string().contains("could not acquire lock"))
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
            Some(Checkpoint {
                sequence: 7,
                stored_ms: None,
                state
            })
        );
        store.clear().unwrap();
        assert_eq!(store.load::<State>().unwrap(), None);
    }

    #[test]
    fn a_directory_held_by_a_live_store_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let _holder = CheckpointStore::open(dir.path(), "test", 1).unwrap();
        let started = Instant::now();
        let refused =
            CheckpointStore::open_waiting(dir.path(), "test", 1, Duration::from_millis(100));
        match refused {
            Err(e @ CheckpointError::Locked { .. }) => {
                assert!(e.to_string().contains(&dir.path().display().to_string()));
            }
            Err(e) => panic!("expected Locked, got {e}"),
            Ok(_) => panic!("a held directory was opened twice"),
        }
        assert!(
            started.elapsed() >= Duration::from_millis(100),
            "gave up early"
        );
    }

    #[test]
    fn a_lock_released_while_waiting_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let holder = CheckpointStore::open(dir.path(), "test", 1).unwrap();
        holder.save(3, &State { usage: vec![] }).unwrap();
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            drop(holder);
        });
        let store = CheckpointStore::open_waiting(dir.path(), "test", 1, Duration::from_secs(10))
            .expect("the lock is released after 200 ms");
        closer.join().unwrap();
        assert_eq!(
            store.load::<State>().unwrap().map(|cp| cp.sequence),
            Some(3)
        );
    }

    #[test]
    fn a_store_sled_cannot_read_is_moved_aside_and_started_afresh() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("decision-c1");
        {
            let store = CheckpointStore::open(&dir, "test", 1).unwrap();
            store.save(7, &State { usage: vec![] }).unwrap();
        }
        tear(&dir);
        let store = CheckpointStore::open(&dir, "test", 1).expect("started afresh");
        assert_eq!(store.load::<State>().unwrap(), None);
        let aside: Vec<String> = std::fs::read_dir(parent.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("decision-c1.unreadable-"))
            .collect();
        assert_eq!(aside.len(), 1, "kept for a post-mortem");
    }

    /// Tears every file of the store in `dir`, as a power loss can.
    fn tear(dir: &Path) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                std::fs::write(&path, b"\xff torn \x00\x01").unwrap();
            }
        }
    }

    #[test]
    fn an_unreadable_store_whose_directory_cannot_be_moved_is_moved_into_it() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("decision-c1");
        {
            let store = CheckpointStore::open(&dir, "test", 1).unwrap();
            store.save(7, &State { usage: vec![] }).unwrap();
        }
        tear(&dir);
        let torn_conf = std::fs::read(dir.join("conf")).unwrap();
        // The names the directory would be renamed to in the next minute are taken by files,
        // so the rename fails as it does for a mount point.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        for s in now..now + 60 {
            std::fs::write(
                parent.path().join(format!("decision-c1.unreadable-{s}")),
                b"",
            )
            .unwrap();
        }
        let store = CheckpointStore::open(&dir, "test", 1).expect("started afresh");
        assert_eq!(store.load::<State>().unwrap(), None);
        store.save(9, &State { usage: vec![] }).unwrap();
        let inside: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(ASIDE_INSIDE)
            })
            .collect();
        assert_eq!(
            inside.len(),
            1,
            "kept for a post-mortem, inside: {inside:?}"
        );
        assert_eq!(std::fs::read(inside[0].join("conf")).unwrap(), torn_conf);
        drop(store);
        // The new store beside the folder reopens with its checkpoint, and the folder stays.
        let store = CheckpointStore::open(&dir, "test", 1).unwrap();
        assert_eq!(
            store.load::<State>().unwrap().map(|cp| cp.sequence),
            Some(9)
        );
        assert!(inside[0].join("conf").exists());
    }

    #[test]
    fn a_second_set_aside_inside_keeps_the_first() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("conf"), b"first").unwrap();
        move_contents_into(dir.path(), &dir.path().join("unreadable-1")).unwrap();
        std::fs::write(dir.path().join("conf"), b"second").unwrap();
        move_contents_into(dir.path(), &dir.path().join("unreadable-2")).unwrap();
        let read = |p: &str| std::fs::read(dir.path().join(p)).unwrap();
        assert_eq!(read("unreadable-1/conf"), b"first");
        assert_eq!(read("unreadable-2/conf"), b"second");
        assert!(!dir.path().join("unreadable-2/unreadable-1").exists());
        assert!(!dir.path().join("conf").exists());
    }

    #[test]
    fn an_unreadable_store_another_process_holds_is_not_moved() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("decision-c1");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("conf"), b"\xff half written").unwrap();
        let db = std::fs::File::create(dir.join("db")).unwrap();
        db.lock().unwrap();
        let refused = CheckpointStore::open_waiting(&dir, "test", 1, Duration::ZERO);
        assert!(
            matches!(refused, Err(CheckpointError::Locked { .. })),
            "{:?}",
            refused.err()
        );
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 1);
        drop(db);
    }

    impl Resumable for State {
        fn last_applied(&self) -> u64 {
            self.usage.first().map_or(0, |(_, s)| *s)
        }
        fn is_for(&self, scope: &str) -> bool {
            self.usage.first().is_some_and(|(s, _)| s == scope)
        }
    }

    /// A checkpoint refused for being ahead of the log (a stream restored from an older
    /// backup, say) is removed: once the log has grown past it, a later start must not resume
    /// it and skip the entries written since the restore.
    #[test]
    fn a_checkpoint_refused_as_ahead_of_the_log_is_not_resumed_once_the_log_grows() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(dir.path(), "test", 1).unwrap();
        let state = State {
            usage: vec![("c".into(), 1_500)],
        };
        store.save(1_500, &state).unwrap();
        assert_eq!(store.resume::<State>("c", 2_000), Some(state));
        assert_eq!(store.resume::<State>("c", 1_000), None, "ahead of the log");
        assert_eq!(
            store.resume::<State>("c", 2_000),
            None,
            "removed when refused"
        );
        assert_eq!(store.load::<State>().unwrap(), None);
    }

    #[test]
    fn damage_that_still_decodes_is_refused_by_the_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(dir.path(), "test", 1).unwrap();
        let state = State {
            usage: vec![("a/b".into(), 42)],
        };
        store.save(7, &state).unwrap();
        let good = store.db.get(KEY).unwrap().unwrap().to_vec();
        // The usage figure is the value's last byte: flipped, the body decodes as well as ever,
        // to another state.
        let mut damaged = good.clone();
        *damaged.last_mut().unwrap() ^= 0x01;
        store.write_raw(&damaged).unwrap();
        match store.load::<State>() {
            Err(CheckpointError::Corrupt(why)) => assert!(why.contains("checksum"), "{why}"),
            other => panic!("damaged checkpoint read as {other:?}"),
        }
        // A flipped sequence byte too (the header is covered, not only the state).
        let mut damaged = good.clone();
        let sequence_at = good.len() - bincode::serialize(&state).unwrap().len() - 1;
        damaged[sequence_at] ^= 0x01;
        store.write_raw(&damaged).unwrap();
        assert!(matches!(
            store.load::<State>(),
            Err(CheckpointError::Corrupt(_))
        ));
        // A checkpoint of a release before the checksum is named as such, and rebuilt.
        let mut older = b"FSCP".to_vec();
        older.extend_from_slice(&good[CHECKED_FROM..]);
        store.write_raw(&older).unwrap();
        match store.load::<State>() {
            Err(CheckpointError::Corrupt(why)) => assert!(why.contains("older release"), "{why}"),
            other => panic!("unchecked checkpoint read as {other:?}"),
        }
        store.write_raw(&good).unwrap();
        assert_eq!(
            store.load::<State>().unwrap(),
            Some(Checkpoint {
                sequence: 7,
                stored_ms: None,
                state
            })
        );
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
        newer.write_raw(b"FSC3 garbage").unwrap();
        drop(newer);
        let store = CheckpointStore::open(dir.path(), "test", 1).unwrap();
        assert!(matches!(
            store.load::<State>(),
            Err(CheckpointError::Corrupt(_))
        ));
    }
}
