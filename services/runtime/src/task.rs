//! Background tasks that end with the service that spawned them.
//!
//! Place in the flow: a service's `serve` future spawns helpers (the submission service's
//! log follower and intake consumer). A `JoinHandle` dropped detaches its task, so a `serve`
//! future dropped before its own shutdown ran (aborted, or raced in a `select!` by its caller)
//! would leave them running: still folding, still holding the sled checkpoint's lock, so a
//! fresh instance could not open it. [`AbortOnDrop`] ties them to the future that owns them.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::task::{JoinError, JoinHandle};

/// A spawned task that is aborted when this handle is dropped. Awaiting it gives the task's
/// outcome, as awaiting its `JoinHandle` would.
#[derive(Debug)]
pub struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> AbortOnDrop<T> {
    /// Takes charge of `handle`.
    pub fn new(handle: JoinHandle<T>) -> Self {
        AbortOnDrop(handle)
    }

    /// Asks the task to stop at its next await; await the handle to know it has.
    pub fn abort(&self) {
        self.0.abort();
    }
}

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_dropped_handle_stops_its_task_and_an_awaited_one_gives_its_outcome() {
        let ran_on = Arc::new(AtomicBool::new(false));
        let flag = ran_on.clone();
        let handle = AbortOnDrop::new(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            flag.store(true, Ordering::SeqCst);
        }));
        drop(handle);
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(
            !ran_on.load(Ordering::SeqCst),
            "the task ran on after its handle was dropped"
        );

        assert_eq!(
            AbortOnDrop::new(tokio::spawn(async { 7 })).await.unwrap(),
            7
        );
        let aborted = AbortOnDrop::new(tokio::spawn(std::future::pending::<()>()));
        aborted.abort();
        assert!(aborted.await.unwrap_err().is_cancelled());
    }
}
