//! Ordered execution: serial queues, and reads that see exactly the writes sent before them.
//!
//! Every serial job of a queue (the global one or one per session key) takes a [`Slot`] in
//! arrival order, on the reader task, before it is spawned. A slot's turn comes when the
//! previous slot of the same queue is dropped and the reads that arrived between the two
//! have ended, so jobs run one at a time in exactly the order the reader saw them, whatever
//! order the runtime happens to poll the spawned tasks in.
//!
//! A read takes a [`ReadTicket`] instead, also in arrival order. It runs once the latest slot
//! before it has ended (or said reads need not wait for it: [`Slot::reads_may_pass`], for a
//! compaction waiting minutes on a model), alongside any other reads; the next slot waits for
//! it. So a pipelined read sees every write sent before it and none sent after it.
//!
//! Queues hold no worker task and vanish when their last slot or read is dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio_util::sync::CancellationToken;

use super::lock;

/// Which queue a job belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum QueueKey {
    Global,
    Session(String),
}

/// What later arrivals of one queue wait for.
#[derive(Debug, Default)]
struct Tail {
    /// The latest slot.
    write: Option<WriteTail>,
    /// The reads that arrived since the latest slot, while any of them is still held.
    reads: Weak<ReadGroup>,
}

#[derive(Debug)]
struct WriteTail {
    seq: u64,
    /// Cancelled when the slot is dropped.
    done: CancellationToken,
    /// A child of `done`, also cancelled early through [`Slot::reads_may_pass`].
    readable: CancellationToken,
}

/// The tails of the live queues.
#[derive(Debug, Default)]
pub(crate) struct SerialQueues {
    tails: Mutex<HashMap<QueueKey, Tail>>,
    next_seq: AtomicU64,
}

impl SerialQueues {
    /// Takes the next place in `key`'s queue. Call in arrival order.
    pub(crate) fn enter(self: &Arc<Self>, key: QueueKey) -> Slot {
        let done = CancellationToken::new();
        let readable = done.child_token();
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let mut tails = lock(&self.tails);
        let tail = tails.entry(key.clone()).or_default();
        let previous = tail.write.replace(WriteTail {
            seq,
            done: done.clone(),
            readable: readable.clone(),
        });
        let reads = std::mem::take(&mut tail.reads).upgrade();
        drop(tails);
        Slot {
            previous: previous.map(|write| write.done),
            reads: reads.map(|group| group.done.clone()),
            done,
            readable,
            key,
            seq,
            queues: Arc::clone(self),
        }
    }

    /// A read of `key`'s queue, placed after every slot taken so far and before every slot
    /// taken later. Call in arrival order.
    pub(crate) fn read(self: &Arc<Self>, key: QueueKey) -> ReadTicket {
        let mut tails = lock(&self.tails);
        let tail = tails.entry(key.clone()).or_default();
        let after = tail.write.as_ref().map(|write| write.readable.clone());
        let group = match tail.reads.upgrade() {
            Some(group) => group,
            None => {
                let group = Arc::new(ReadGroup {
                    done: CancellationToken::new(),
                    key,
                    queues: Arc::downgrade(self),
                });
                tail.reads = Arc::downgrade(&group);
                group
            }
        };
        ReadTicket {
            after,
            _group: group,
        }
    }

    /// Forgets `key`'s tail once nothing waits on it. Called with the lock held.
    fn forget_if_idle(tails: &mut HashMap<QueueKey, Tail>, key: &QueueKey) {
        if tails
            .get(key)
            .is_some_and(|tail| tail.write.is_none() && tail.reads.strong_count() == 0)
        {
            tails.remove(key);
        }
    }
}

/// A place in a queue. Dropping it lets the next job of the queue run.
#[derive(Debug)]
pub(crate) struct Slot {
    /// The previous slot's `done`.
    previous: Option<CancellationToken>,
    /// Cancelled when the reads between the previous slot and this one have ended.
    reads: Option<CancellationToken>,
    done: CancellationToken,
    readable: CancellationToken,
    key: QueueKey,
    seq: u64,
    queues: Arc<SerialQueues>,
}

impl Slot {
    /// Resolves when every earlier job and read of this queue has finished. Cancel-safe: it
    /// can be raced in `select!` and awaited again.
    pub(crate) async fn wait_turn(&mut self) {
        if let Some(previous) = &self.previous {
            previous.cancelled().await;
            self.previous = None;
        }
        if let Some(reads) = &self.reads {
            reads.cancelled().await;
            self.reads = None;
        }
    }

    /// Cancelling this token lets reads that arrived after this job run before it ends; they
    /// see the state as it is meanwhile. Jobs queued after it still wait.
    pub(crate) fn reads_may_pass(&self) -> CancellationToken {
        self.readable.clone()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.done.cancel();
        let mut tails = lock(&self.queues.tails);
        if let Some(tail) = tails.get_mut(&self.key)
            && tail
                .write
                .as_ref()
                .is_some_and(|write| write.seq == self.seq)
        {
            tail.write = None;
            SerialQueues::forget_if_idle(&mut tails, &self.key);
        }
    }
}

/// The reads between two slots; the later slot waits until the last of them is dropped.
#[derive(Debug)]
struct ReadGroup {
    done: CancellationToken,
    key: QueueKey,
    queues: Weak<SerialQueues>,
}

impl Drop for ReadGroup {
    fn drop(&mut self) {
        self.done.cancel();
        if let Some(queues) = self.queues.upgrade() {
            SerialQueues::forget_if_idle(&mut lock(&queues.tails), &self.key);
        }
    }
}

/// A read's place: after the slot that was last when it arrived; the next slot waits for it
/// to be dropped.
#[derive(Debug)]
pub(crate) struct ReadTicket {
    after: Option<CancellationToken>,
    _group: Arc<ReadGroup>,
}

impl ReadTicket {
    /// Resolves when the slots before the read have ended or let reads pass. Cancel-safe.
    pub(crate) async fn wait_turn(&self) {
        if let Some(after) = &self.after {
            after.cancelled().await;
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

    #[tokio::test]
    async fn reads_sit_between_the_slots_around_them_and_leave_no_queue_behind() {
        use futures::FutureExt;
        let queues = Arc::new(SerialQueues::default());
        let key = || QueueKey::Session("a".into());
        let early = queues.read(key());
        assert!(
            early.wait_turn().now_or_never().is_some(),
            "nothing before it"
        );
        let mut w1 = queues.enter(key());
        assert!(!turn_has_come(&mut w1), "w1 waits for the read before it");
        let r1 = queues.read(key());
        let mut w2 = queues.enter(key());
        drop(early);
        assert!(turn_has_come(&mut w1));
        assert!(r1.wait_turn().now_or_never().is_none(), "r1 waits for w1");
        w1.reads_may_pass().cancel();
        assert!(r1.wait_turn().now_or_never().is_some(), "w1 let reads pass");
        assert!(!turn_has_come(&mut w2), "w2 waits for w1 itself");
        drop(w1);
        assert!(!turn_has_come(&mut w2), "and for r1");
        drop(r1);
        assert!(turn_has_come(&mut w2));
        drop(w2);
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
