//! Ordered execution for serial concurrency classes.
//!
//! Every job of a queue (the global one or one per session key) takes a [`Slot`] in arrival
//! order, on the reader task, before it is spawned. A slot's turn comes when the previous
//! slot of the same queue is dropped, so jobs run one at a time in exactly the order the
//! reader saw them, whatever order the runtime happens to poll the spawned tasks in.
//! Queues hold no worker task and vanish when their last slot is dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::lock;

/// Which queue a job belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum QueueKey {
    Global,
    Session(String),
}

/// The tail of each live queue: the latest slot's sequence number and its "done" signal.
#[derive(Debug, Default)]
pub(crate) struct SerialQueues {
    tails: Mutex<HashMap<QueueKey, (u64, oneshot::Receiver<()>)>>,
    next_seq: AtomicU64,
}

impl SerialQueues {
    /// Takes the next place in `key`'s queue. Call in arrival order.
    pub(crate) fn enter(self: &Arc<Self>, key: QueueKey) -> Slot {
        let (done, done_rx) = oneshot::channel();
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let previous = lock(&self.tails).insert(key.clone(), (seq, done_rx));
        Slot {
            previous: previous.map(|(_, rx)| rx),
            _done: done,
            key,
            seq,
            queues: Arc::clone(self),
        }
    }
}

/// A place in a queue. Dropping it lets the next job of the queue run.
#[derive(Debug)]
pub(crate) struct Slot {
    previous: Option<oneshot::Receiver<()>>,
    /// Dropped with the slot, which wakes the next slot's `wait_turn`.
    _done: oneshot::Sender<()>,
    key: QueueKey,
    seq: u64,
    queues: Arc<SerialQueues>,
}

impl Slot {
    /// Resolves when every earlier job of this queue has finished. Cancel-safe: it can be
    /// raced in `select!` and awaited again.
    pub(crate) async fn wait_turn(&mut self) {
        if let Some(previous) = &mut self.previous {
            // An error means the sender was dropped, which is exactly "the previous job ended".
            let _ = previous.await;
            self.previous = None;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut tails = lock(&self.queues.tails);
        if tails
            .get(&self.key)
            .is_some_and(|(seq, _)| *seq == self.seq)
        {
            tails.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn slots_of_one_queue_run_in_order_and_queues_are_independent() {
        let queues = Arc::new(SerialQueues::default());
        let a1 = queues.enter(QueueKey::Session("a".into()));
        let mut a2 = queues.enter(QueueKey::Session("a".into()));
        let mut b1 = queues.enter(QueueKey::Session("b".into()));
        let mut g1 = queues.enter(QueueKey::Global);

        tokio::time::timeout(Duration::from_secs(5), async {
            b1.wait_turn().await;
            g1.wait_turn().await;
        })
        .await
        .expect("other queues are not blocked by `a`");
        let mut a2_turn = turn_has_come(&mut a2);
        assert!(!a2_turn, "a2 must wait for a1");
        drop(a1);
        a2_turn = turn_has_come(&mut a2);
        assert!(a2_turn);
        drop((a2, b1, g1));
        assert!(
            lock(&queues.tails).is_empty(),
            "finished queues are removed"
        );
    }

    /// Polls `wait_turn` once: whether the slot's turn has come.
    fn turn_has_come(slot: &mut Slot) -> bool {
        use futures::FutureExt;
        slot.wait_turn().now_or_never().is_some()
    }
}
