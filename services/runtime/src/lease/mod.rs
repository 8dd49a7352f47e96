//! One writer per cluster and role: a lease in a JetStream key-value bucket.
//!
//! Place in the flow: the decision and preemption services each write one cluster's decisions
//! (placements, preemption orders) from their own fold. Two instances of either for one
//! cluster (a unit started twice, a host replaced while the old one still runs) would decide
//! from the same log independently: two jobs on the same GPUs, two victims for one waiter. So
//! before it decides, an instance holds the lease `<role>.<cluster>` in the bucket
//! [`LEASE_BUCKET`]; another one folds the log meanwhile (a warm standby) and takes over when
//! the lease is let go or runs out.
//!
//! How it holds:
//! - The bucket keeps one value per key and drops it `ttl` after its last write (the
//!   bucket's `max_age`, fixed when the bucket is made: [`DEFAULT_TTL`]). The holder writes
//!   the key again every `ttl / 5` with the revision it last wrote as the expected one, so a
//!   write only succeeds while nobody else took the key in between.
//! - The holder counts the lease as its own until `2/3 ttl` after sending its last write that
//!   succeeded ([`Lease::holds`]); the value is dropped no earlier than `ttl` after the server
//!   stored it, later than that send. Only then can another instance create the key. The
//!   third of the `ttl` between is the margin for a decision already being published (a
//!   cycle started in time publishes to its end). A write sent while the holder is cut off
//!   waits in the client's buffer to go out at the reconnect, however late: a holder with
//!   writes of unknown outcome stops once it is cut off past its hold
//!   ([`crate::disconnect::cut_off_unheld`]), so the buffer ends with the process before
//!   another instance may take the lease (bytes already written to the socket before the
//!   client noticed a silent partition stay with the operating system: the audit reports
//!   what they give away twice).
//!   Both durations assume the server's clock and the holder's monotonic clock run alike.
//! - A write refused for its revision while another instance's name is in the key means that
//!   one holds it: the lease is lost ([`RenewError::Lost`]), and the service stops rather than
//!   decide beside the new holder (restarted, it stands by). Refused with nobody in the key
//!   (it ran out while the server was away longer than the ttl) or this instance's own name
//!   (a renewal landed but its acknowledgement was lost), the lease is simply taken again.
//! - A write that fails otherwise (timeout, no server) is tried again at the next renewal; the
//!   holder stops deciding once its lease runs out, and finds out at the next write whether it
//!   kept it.
//! - Each instance names itself ([`holder_for`]): with a checkpoint directory, by host, the
//!   directory's path and a random token kept in its store. A restart on the same directory
//!   (after a crash that left the lease behind) takes its own lease back at once: sled locks
//!   the directory, so the instance that wrote the lease before is gone; an instance on another
//!   machine has another token. Without one, by host, process and a random token, and a
//!   crashed instance's successor waits out the `ttl`.
//! - A service keeps its lease with a [`Keeper`], a task of its own: a bucket slow to answer
//!   never holds up the service's loop. Taking the lease, the keeper reads the cluster's log
//!   end, and the service decides only once its fold has reached it.
//! - Stopping gracefully lets the lease go ([`Lease::release`]), so a successor need not wait.
//! - After three renewals or tries in a row that reach no bucket, the bucket is
//!   looked up and, if missing (an operator deleted it), made again.

use std::path::Path;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use tokio::time::Instant;

use crate::checkpoint::CheckpointStore;

mod holders;
mod keeper;

pub use holders::{Holding, holders};
pub use keeper::{HoldWatch, Keeper, LeaseView};

/// The key-value bucket holding every lease.
pub const LEASE_BUCKET: &str = "fairshare_leases";

/// How long a lease lasts after its holder's last write, unless the bucket was made with
/// another (the bucket's own `max_age` is what holds).
pub const DEFAULT_TTL: Duration = Duration::from_secs(15);

/// Why the lease bucket could not be used.
#[derive(Debug, thiserror::Error)]
pub enum BucketError {
    /// The bucket could not be read or created (no JetStream, no permission).
    #[error("cannot open or create the lease bucket {LEASE_BUCKET}: {0}")]
    Open(String),
    /// The bucket exists without an expiry, so a lease would never run out.
    #[error("the lease bucket {LEASE_BUCKET} has no max_age: delete it and let a service make it")]
    NoExpiry,
}

/// Why a renewal failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenewError {
    /// Someone else holds the key now: this instance's lease is over.
    #[error("the lease {key} is held by {holder} now")]
    Lost {
        /// The lease's key.
        key: String,
        /// Who holds it now.
        holder: String,
    },
    /// The write's outcome is unknown (timeout, no server): tried again at the next renewal.
    #[error("could not renew the lease {key}: {reason}")]
    Unavailable {
        /// The lease's key.
        key: String,
        /// What failed.
        reason: String,
    },
}

/// What a try to take the lease found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// This instance holds it now.
    Taken,
    /// Another instance holds it.
    HeldBy(String),
    /// The bucket could not be reached, or the lease moved while it was read; try again later.
    Unavailable(String),
}

/// The lease of one role and cluster, held or wanted by one instance.
pub struct Lease {
    /// The bucket.
    store: kv::Store,
    /// For making the bucket again should it be deleted while the service runs.
    js: jetstream::Context,
    /// Replicas the bucket is made with.
    replicas: usize,
    /// Renewals or tries in a row that could not reach the bucket.
    failures: u32,
    /// `<role>.<cluster>`.
    key: String,
    /// The cluster.
    cluster: String,
    /// Who this instance is, as written in the lease's value.
    holder: String,
    /// How long the value lasts after a write (the bucket's `max_age`).
    ttl: Duration,
    /// The revision of this instance's last successful write; `None` while not held.
    revision: Option<u64>,
    /// Until when this instance counts the lease as its own (2/3 of the ttl after it sent
    /// its last successful write).
    valid_until: Option<Instant>,
    /// The other holder last reported while standing by (so it is logged once, not per try).
    standing_by_for: Option<String>,
}

/// This instance's name in a lease: `host:<checkpoint dir>#<token>` when it keeps a
/// checkpoint, the token made once and kept in the store ([`CheckpointStore::instance_token`]),
/// so a restart on the same directory has the same name (sled keeps the directory to one live
/// process) and an instance elsewhere, whatever its host name and path, another. Otherwise
/// `host:pid<pid>#<random>`. A directory copied to another machine carries its token along:
/// run at most one of the two.
pub fn holder_for(store: Option<&CheckpointStore>, checkpoint_dir: Option<&Path>) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned());
    let random = || uuid::Uuid::now_v7().simple().to_string();
    match (store, checkpoint_dir) {
        (Some(store), Some(dir)) => {
            let token = store.instance_token().unwrap_or_else(|e| {
                tracing::warn!(
                    "cannot keep this instance's name in its checkpoint ({e}): a restart \
                     after a crash waits for its old lease to run out"
                );
                random()
            });
            let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
            format!("{host}:{}#{token}", dir.display())
        }
        _ => format!("{host}:pid{}#{}", std::process::id(), random()),
    }
}

/// The lease bucket, made with `ttl` and `replicas` if it is missing.
async fn bucket(
    js: &jetstream::Context,
    ttl: Duration,
    replicas: usize,
) -> Result<kv::Store, BucketError> {
    match js.get_key_value(LEASE_BUCKET).await {
        Ok(store) => Ok(store),
        Err(_) => js
            .create_key_value(kv::Config {
                bucket: LEASE_BUCKET.to_owned(),
                description: "fairshare: which instance decides for each cluster and role"
                    .to_owned(),
                history: 1,
                max_age: ttl,
                num_replicas: replicas.max(1),
                ..Default::default()
            })
            .await
            .map_err(|e| BucketError::Open(e.to_string())),
    }
}

/// What a successful [`Lease::renew`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// Written again over this instance's last write.
    Renewed,
    /// The last write was gone or moved (ran out, an acknowledgement lost) and nobody else held
    /// the key: taken afresh. Another instance may have held and let it go in between.
    TakenAgain,
}

/// What one [`Lease::keep`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kept {
    /// Taken just now.
    Taken,
    /// Renewed.
    Held,
    /// Another instance holds it.
    StandingBy,
    /// The bucket did not answer (or the lease moved while it was read).
    Unreachable,
}

/// Failed renewals or tries in a row after which the bucket is looked up (and made) again: an
/// operator may have deleted it while the services ran.
const REOPEN_AFTER: u32 = 3;

impl Lease {
    /// Opens (or makes, with [`DEFAULT_TTL`] and `replicas`) the bucket, for the lease of
    /// `role` in `cluster`, not yet held. The ttl is the bucket's.
    pub async fn open(
        js: &jetstream::Context,
        role: &str,
        cluster: &str,
        holder: String,
        replicas: usize,
    ) -> Result<Lease, BucketError> {
        Self::open_with_ttl(js, role, cluster, holder, replicas, DEFAULT_TTL).await
    }

    /// [`Lease::open`] for a deciding service of `role` in `cluster` that keeps its checkpoint
    /// in `store` at `checkpoint_dir` (both `None` without one), named by [`holder_for`].
    /// Open the store first: it makes the directory the name resolves.
    pub async fn for_service(
        js: &jetstream::Context,
        role: &str,
        cluster: &str,
        store: Option<&CheckpointStore>,
        checkpoint_dir: Option<&Path>,
        replicas: usize,
    ) -> Result<Lease, BucketError> {
        let holder = holder_for(store, checkpoint_dir);
        Self::open(js, role, cluster, holder, replicas).await
    }

    /// [`Lease::open`] making the bucket, if it is missing, with `ttl` (tests use short ones).
    pub async fn open_with_ttl(
        js: &jetstream::Context,
        role: &str,
        cluster: &str,
        holder: String,
        replicas: usize,
        ttl: Duration,
    ) -> Result<Lease, BucketError> {
        let store = bucket(js, ttl, replicas).await?;
        let ttl = store
            .status()
            .await
            .map_err(|e| BucketError::Open(e.to_string()))?
            .max_age();
        if ttl.is_zero() {
            return Err(BucketError::NoExpiry);
        }
        Ok(Lease {
            store,
            key: format!("{role}.{cluster}"),
            cluster: cluster.to_owned(),
            holder,
            ttl,
            revision: None,
            valid_until: None,
            standing_by_for: None,
            js: js.clone(),
            replicas,
            failures: 0,
        })
    }

    /// The lease's key, `<role>.<cluster>`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// This instance's name in the lease.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// How long the lease lasts after a write.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How often the holder writes the lease again, and a waiting instance tries to take it.
    pub fn renew_every(&self) -> Duration {
        (self.ttl / 5).max(Duration::from_millis(100))
    }

    /// Whether this instance may decide at `now`: it holds the lease and its last successful
    /// write was sent less than 2/3 of the ttl ago.
    pub fn holds(&self, now: Instant) -> bool {
        self.valid_until.is_some_and(|until| now < until)
    }

    /// Whether this instance took the lease and has not lost or let it go (it may still have
    /// run out: [`Lease::holds`]).
    pub fn taken(&self) -> bool {
        self.revision.is_some()
    }

    fn held_from(&mut self, sent: Instant, revision: u64) {
        self.revision = Some(revision);
        self.valid_until = Some(sent + self.ttl * 2 / 3);
    }

    /// Tries once to take the lease: creates the key, or takes it back if the value names this
    /// instance (a restart on the same checkpoint directory).
    pub async fn try_take(&mut self) -> Attempt {
        let sent = Instant::now();
        match self
            .store
            .create(&self.key, Bytes::from(self.holder.clone()))
            .await
        {
            Ok(revision) => {
                self.held_from(sent, revision);
                return Attempt::Taken;
            }
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {}
            Err(e) => return Attempt::Unavailable(e.to_string()),
        }
        let entry = match self.store.entry(self.key.clone()).await {
            Ok(Some(entry)) if entry.operation == kv::Operation::Put => entry,
            // Gone between the two requests: the next try may create it.
            Ok(_) => return Attempt::Unavailable("the lease ran out just now".to_owned()),
            Err(e) => return Attempt::Unavailable(e.to_string()),
        };
        let owner = String::from_utf8_lossy(&entry.value).into_owned();
        if owner != self.holder {
            return Attempt::HeldBy(owner);
        }
        match self
            .store
            .update(&self.key, Bytes::from(self.holder.clone()), entry.revision)
            .await
        {
            Ok(revision) => {
                self.held_from(sent, revision);
                Attempt::Taken
            }
            // Written in between (or the entry read was a replica's older one): the next try
            // reads who holds it.
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                Attempt::Unavailable("the lease changed hands just now".to_owned())
            }
            Err(e) => Attempt::Unavailable(e.to_string()),
        }
    }

    /// Writes the lease again with the last revision as the expected one. Refused for its
    /// revision, it is taken again if nobody else holds it: the value ran out while the
    /// server was away longer than the ttl, or a renewal landed whose acknowledgement was
    /// lost (the value still names this instance, under a newer revision).
    pub async fn renew(&mut self) -> Result<Renewal, RenewError> {
        let Some(revision) = self.revision else {
            return self.take_again().await;
        };
        let sent = Instant::now();
        match self
            .store
            .update(&self.key, Bytes::from(self.holder.clone()), revision)
            .await
        {
            Ok(revision) => {
                self.held_from(sent, revision);
                Ok(Renewal::Renewed)
            }
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => self.take_again().await,
            Err(e) => {
                if crate::missing::missing(&e).is_some() {
                    // The bucket is gone (deleted), and the lease with it: stop deciding now,
                    // not when the last write's margin runs out. Whoever makes the bucket again
                    // does so only after three failed tries, later than this renewal, so no
                    // one takes it while this instance still decides. Its revision meant the
                    // old bucket's: a new one counts afresh.
                    self.revision = None;
                    self.valid_until = None;
                }
                Err(RenewError::Unavailable {
                    key: self.key.clone(),
                    reason: crate::missing::describe(&e),
                })
            }
        }
    }

    /// After a refused renewal: the lease is this instance's again only if nobody else took it.
    async fn take_again(&mut self) -> Result<Renewal, RenewError> {
        self.revision = None;
        self.valid_until = None;
        match self.try_take().await {
            Attempt::Taken => {
                tracing::warn!(
                    lease = self.key,
                    "the lease had run out or moved on unseen; taken again"
                );
                Ok(Renewal::TakenAgain)
            }
            Attempt::HeldBy(holder) => Err(RenewError::Lost {
                key: self.key.clone(),
                holder,
            }),
            Attempt::Unavailable(reason) => Err(RenewError::Unavailable {
                key: self.key.clone(),
                reason,
            }),
        }
    }

    /// What the [`Keeper`] does at each [`Lease::renew_every`]: renews the lease it holds, or tries
    /// to take it, and logs what changed. [`Kept::Taken`] when the lease was just taken (decide
    /// at once); an error when it was lost (stop deciding).
    async fn keep(&mut self) -> Result<Kept, RenewError> {
        let kept = self.keep_once().await?;
        if kept == Kept::Unreachable {
            self.failures = self.failures.saturating_add(1);
            if self.failures.is_multiple_of(REOPEN_AFTER) {
                match bucket(&self.js, self.ttl, self.replicas).await {
                    Ok(store) => self.store = store,
                    Err(e) => tracing::warn!(lease = self.key, "{e}"),
                }
            }
        } else {
            self.failures = 0;
        }
        Ok(kept)
    }

    async fn keep_once(&mut self) -> Result<Kept, RenewError> {
        if self.taken() {
            return match self.renew().await {
                Ok(Renewal::Renewed) => Ok(Kept::Held),
                // Someone may have held it in between: the fold must catch up as on any taking.
                Ok(Renewal::TakenAgain) => Ok(Kept::Taken),
                Err(e @ RenewError::Lost { .. }) => {
                    tracing::error!("{e}: this instance stops");
                    Err(e)
                }
                Err(e) => {
                    tracing::warn!("{e}; nothing is decided once it runs out");
                    Ok(Kept::Unreachable)
                }
            };
        }
        match self.try_take().await {
            Attempt::Taken => {
                tracing::info!(
                    lease = self.key,
                    holder = self.holder,
                    "holding the lease; deciding"
                );
                self.standing_by_for = None;
                Ok(Kept::Taken)
            }
            Attempt::HeldBy(other) => {
                if self.standing_by_for.as_ref() != Some(&other) {
                    tracing::warn!(
                        lease = self.key,
                        holder = other,
                        "another instance decides; standing by (folding the log) until it lets \
                         the lease go or the lease runs out ({:?} after its last renewal)",
                        self.ttl
                    );
                    self.standing_by_for = Some(other);
                }
                Ok(Kept::StandingBy)
            }
            Attempt::Unavailable(reason) => {
                tracing::warn!(lease = self.key, "cannot take the lease yet: {reason}");
                Ok(Kept::Unreachable)
            }
        }
    }

    /// Lets the lease go, if this instance still holds it (a successor then takes it at once
    /// rather than after the ttl). A failure only means the successor waits the ttl out.
    pub async fn release(&mut self) {
        let Some(revision) = self.revision.take() else {
            return;
        };
        self.valid_until = None;
        if let Err(e) = self
            .store
            .purge_expect_revision(&self.key, Some(revision))
            .await
        {
            tracing::warn!(key = self.key, "could not let the lease go: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use super::*;

    #[test]
    fn an_instance_is_named_by_its_checkpoint_directory_or_else_uniquely() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let named = {
            let store = CheckpointStore::open(&path, "k", 1).unwrap();
            holder_for(Some(&store), Some(&path))
        };
        // Reopened (a restart), however the path is spelled: the same name, so a restart on
        // it takes its own lease back.
        let again = {
            let store = CheckpointStore::open(&path, "k", 1).unwrap();
            holder_for(Some(&store), Some(&path.join(".")))
        };
        assert_eq!(again, named);
        let canonical = path.canonicalize().unwrap();
        assert!(
            named.contains(&format!(":{}#", canonical.display())),
            "{named}"
        );
        // The same path on another machine (a fresh store there): another name.
        let elsewhere = tempfile::tempdir().unwrap();
        let other = CheckpointStore::open(elsewhere.path(), "k", 1).unwrap();
        let other_token = holder_for(Some(&other), Some(elsewhere.path()));
        assert_ne!(
            named.rsplit_once('#').map(|(_, t)| t),
            other_token.rsplit_once('#').map(|(_, t)| t)
        );
        // Without a store, every instance is another.
        assert_ne!(holder_for(None, None), holder_for(None, None));
    }
}
