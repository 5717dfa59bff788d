//! The output budget: how many bytes the peer holds for a client that may not be reading.
//!
//! Every message for the client is counted from the moment it is produced until the writer
//! has flushed it, and a handler that is about to build a large result (a whole context)
//! reserves its estimated size first. While the total is at the limit the reader stops
//! reading input (back-pressure: the client's writes block once the pipe is full), and a
//! reservation waits for room, so a client that pipelines large reads and reads no answers
//! holds the daemon to about the limit instead of to one copy of every answer. One
//! reservation larger than the whole limit is let through when nothing else is outstanding,
//! so a single large answer is never refused.

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// Bytes produced for the client and not yet written, plus reservations.
#[derive(Debug)]
pub(crate) struct OutputBudget {
    limit: usize,
    used: AtomicUsize,
    /// Woken whenever bytes are given back.
    room: Notify,
}

impl OutputBudget {
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit: limit.max(1),
            used: AtomicUsize::new(0),
            room: Notify::new(),
        })
    }

    /// Counts `bytes` that exist already (a message produced): never waits.
    pub(crate) fn charge(&self, bytes: usize) {
        self.used.fetch_add(bytes, Ordering::AcqRel);
    }

    /// Gives back `bytes` charged or reserved before (a message written, a reservation
    /// dropped).
    pub(crate) fn release(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
        self.room.notify_waiters();
    }

    /// What is held now.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// Resolves once less than the limit is held.
    pub(crate) async fn wait_for_room(&self) {
        self.wait_until(|used| used < self.limit).await;
    }

    /// Waits until `bytes` fit under the limit (or nothing at all is held, for a result
    /// larger than the limit), then holds them until the reservation is dropped.
    pub(crate) async fn reserve(self: &Arc<Self>, bytes: usize) -> Reservation {
        loop {
            let fits = |used: usize| used == 0 || used.saturating_add(bytes) <= self.limit;
            let taken = self
                .used
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                    fits(used).then(|| used + bytes)
                });
            if taken.is_ok() {
                return Reservation {
                    budget: Arc::clone(self),
                    bytes,
                };
            }
            self.wait_until(fits).await;
        }
    }

    async fn wait_until(&self, ready: impl Fn(usize) -> bool) {
        loop {
            // Registered before the check, so a release between the two is not missed.
            let mut notified = pin!(self.room.notified());
            notified.as_mut().enable();
            if ready(self.used()) {
                return;
            }
            notified.await;
        }
    }
}

/// Bytes held for a result being built; given back when dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: Arc<OutputBudget>,
    bytes: usize,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lets the spawned tasks of this (current-thread) runtime run until they wait.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn reservations_wait_for_room_and_one_oversized_goes_alone() {
        let budget = OutputBudget::new(100);
        let first = budget.reserve(60).await;
        let waiting = tokio::spawn({
            let budget = Arc::clone(&budget);
            async move { budget.reserve(60).await }
        });
        settle().await;
        assert!(!waiting.is_finished(), "60 + 60 does not fit in 100");
        drop(first);
        let second = waiting.await.unwrap();
        assert_eq!(budget.used(), 60);
        drop(second);
        // Larger than the whole budget: let through when nothing else is held.
        let huge = budget.reserve(500).await;
        assert_eq!(budget.used(), 500);
        drop(huge);
        assert_eq!(budget.used(), 0);
    }

    #[tokio::test]
    async fn charges_stop_the_reader_until_released() {
        let budget = OutputBudget::new(100);
        budget.charge(150);
        let reader = tokio::spawn({
            let budget = Arc::clone(&budget);
            async move { budget.wait_for_room().await }
        });
        settle().await;
        assert!(!reader.is_finished(), "150 of 100 held");
        budget.release(60);
        reader.await.unwrap();
        assert_eq!(budget.used(), 90);
    }
}
