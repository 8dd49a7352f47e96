//! The task that keeps a service's lease ([`Keeper`]) off the service's own loop.
//!
//! Place in the flow: the decision and preemption services spawn one at start; their serve
//! loops read [`Keeper::holds`] before each cycle or pass and await [`Keeper::changed`] to learn
//! that the lease was taken (catch the fold up to [`LeaseView::log_end`]) or lost (stop).

use std::time::Duration;

use tokio::time::Instant;

use super::{Kept, Lease, RenewError};

/// What a service's loop sees of its lease, kept up to date by its [`Keeper`].
#[derive(Debug, Clone, Default)]
pub struct LeaseView {
    /// Until when this instance may start decisions ([`Lease::holds`]); `None` while not held.
    pub valid_until: Option<Instant>,
    /// How many times the lease was taken (a change means: just taken, catch up and decide).
    pub taken: u64,
    /// The newest sequence of the cluster's log when the lease was last taken: the fold must
    /// reach it before the first decision, or it could miss the previous holder's last ones (a
    /// standby's fold may lag).
    pub log_end: u64,
    /// Set when another instance took the lease: the service stops.
    pub lost: Option<RenewError>,
    /// Until when this instance stands by: another instance held the lease at the last try to
    /// take it, and until a lease's ttl after that try (a bucket that stops answering does not
    /// make it stand by for ever). Its answers to requests (explain, queue listings) would come
    /// from a fold that may lag the holder's.
    pub standing_by_until: Option<Instant>,
}

/// [`Keeper::holds`], apart from the keeper ([`Keeper::hold_watch`]).
#[derive(Debug, Clone)]
pub struct HoldWatch(tokio::sync::watch::Receiver<LeaseView>);

impl HoldWatch {
    /// Whether the instance may start a decision at `now`.
    pub fn holds(&self, now: Instant) -> bool {
        self.0.borrow().valid_until.is_some_and(|until| now < until)
    }
}

/// A task that keeps one lease (renewed, or tried for, every [`Lease::renew_every`]) off the
/// service's loop, so a bucket slow to answer never holds up the fold, explains or shutdown;
/// the loop reads [`Keeper::holds`] and awaits [`Keeper::changed`]. Dropped (a crash: the
/// serve future aborted), the task ends without letting the lease go; [`Keeper::release`] lets
/// it go.
pub struct Keeper {
    /// The latest view.
    view: tokio::sync::watch::Receiver<LeaseView>,
    /// Asks the task to let the lease go and end.
    release: Option<tokio::sync::oneshot::Sender<()>>,
    /// The task.
    task: crate::task::AbortOnDrop<()>,
}

impl Keeper {
    /// Starts keeping `lease` (the first try is at once).
    pub fn spawn(mut lease: Lease) -> Keeper {
        let (tx, view) = tokio::sync::watch::channel(LeaseView::default());
        let (release, mut released) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let mut timer = tokio::time::interval(lease.renew_every());
            timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    biased;
                    asked = &mut released => {
                        // Only when asked: the sender dropped with the Keeper is a crash,
                        // which leaves the lease to run out.
                        if asked.is_ok() {
                            lease.release().await;
                        }
                        tx.send_modify(|v| v.valid_until = None);
                        return;
                    }
                    _ = timer.tick() => {}
                }
                let kept = lease.keep().await;
                let log_end = match kept {
                    Ok(Kept::Taken) => {
                        match crate::log::cluster_log_end(&lease.js, &lease.cluster).await {
                            Ok(end) => Some(end),
                            Err(e) => {
                                tracing::warn!(
                                    lease = lease.key,
                                    "cannot read the log's end after taking the lease ({e}); \
                                 letting it go"
                                );
                                lease.release().await;
                                None
                            }
                        }
                    }
                    _ => None,
                };
                tx.send_modify(|v| {
                    v.valid_until = lease.valid_until;
                    match kept {
                        Ok(Kept::StandingBy) => {
                            v.standing_by_until = Some(Instant::now() + lease.ttl());
                        }
                        Ok(Kept::Taken | Kept::Held) => v.standing_by_until = None,
                        Ok(Kept::Unreachable) | Err(_) => {}
                    }
                    if let Some(end) = log_end {
                        v.taken += 1;
                        v.log_end = end;
                    }
                    if let Err(e) = &kept {
                        v.lost = Some(e.clone());
                    }
                });
                if kept.is_err() {
                    return;
                }
            }
        });
        Keeper {
            view,
            release: Some(release),
            task: crate::task::AbortOnDrop::new(task),
        }
    }

    /// Whether this instance may start a decision at `now`.
    pub fn holds(&self, now: Instant) -> bool {
        self.view
            .borrow()
            .valid_until
            .is_some_and(|until| now < until)
    }

    /// A handle that answers [`Keeper::holds`] apart from the keeper (for a future raced
    /// against work that borrows the service).
    pub fn hold_watch(&self) -> HoldWatch {
        HoldWatch(self.view.clone())
    }

    /// Whether this instance stands by at `now` ([`LeaseView::standing_by_until`]).
    pub fn standing_by(&self, now: Instant) -> bool {
        self.view
            .borrow()
            .standing_by_until
            .is_some_and(|until| now < until)
    }

    /// Waits for the next change of the view and returns it; a keeper that ended without a
    /// lost lease (it cannot, short of a panic) reads as lost.
    pub async fn changed(&mut self) -> LeaseView {
        match self.view.changed().await {
            Ok(()) => self.view.borrow_and_update().clone(),
            Err(_) => {
                let mut view = self.view.borrow().clone();
                if view.lost.is_none() {
                    view.lost = Some(RenewError::Unavailable {
                        key: String::new(),
                        reason: "the lease keeper stopped".to_owned(),
                    });
                }
                // Never again: the caller stops on it.
                view
            }
        }
    }

    /// Lets the lease go (a successor then takes it at once) and waits for the task to end,
    /// at most `within`.
    pub async fn release(mut self, within: Duration) {
        if let Some(release) = self.release.take() {
            let _ = release.send(());
        }
        let _ = tokio::time::timeout(within, &mut self.task).await;
    }
}
