//! Requests to one server queued to its parallelism.
//!
//! A local server (llama.cpp, Ollama, node-llama-cpp) often has one slot: a second request
//! sent while the first runs waits there silently, with its timeout running, and fails. So
//! every summarizer of one server shares one [`RequestQueue`] per process (the history and
//! turn-prefix requests of a split turn, every session's compactions), and a request is sent
//! only when a slot is free. Its first-token timeout starts when it is sent, not while it
//! waits here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The requests of one server that may run at once; see the module doc.
#[derive(Debug)]
pub struct RequestQueue {
    key: String,
    slots: usize,
    semaphore: Arc<Semaphore>,
    waiting: AtomicUsize,
}

/// Queues by server and parallelism.
type QueueMap = HashMap<(String, usize), Weak<RequestQueue>>;

/// The queues alive in this process.
static QUEUES: LazyLock<Mutex<QueueMap>> = LazyLock::new(|| Mutex::new(HashMap::new()));

impl RequestQueue {
    /// The queue of the server at `key` (its base URL) with `slots` requests at once, shared
    /// with every other summarizer of this process that names the same server and slots.
    pub fn shared(key: &str, slots: usize) -> Arc<RequestQueue> {
        let slots = slots.max(1);
        let key = key.trim_end_matches('/').to_ascii_lowercase();
        let mut queues = QUEUES.lock().unwrap_or_else(PoisonError::into_inner);
        queues.retain(|_, queue| queue.strong_count() > 0);
        if let Some(queue) = queues.get(&(key.clone(), slots)).and_then(Weak::upgrade) {
            return queue;
        }
        let queue = Arc::new(RequestQueue {
            key: key.clone(),
            slots,
            semaphore: Arc::new(Semaphore::new(slots)),
            waiting: AtomicUsize::new(0),
        });
        queues.insert((key, slots), Arc::downgrade(&queue));
        queue
    }

    /// The server this queue is for.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Requests that may run at once.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// A slot at once, if one is free.
    pub fn try_acquire(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.semaphore).try_acquire_owned().ok()
    }

    /// Waits for a slot; dropping the future leaves the queue.
    pub async fn acquire(&self) -> OwnedSemaphorePermit {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        struct Leave<'a>(&'a AtomicUsize);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let _leave = Leave(&self.waiting);
        Arc::clone(&self.semaphore)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed")
    }

    /// Requests waiting for a slot now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn one_server_one_queue() {
        let a = RequestQueue::shared("http://127.0.0.1:9/v1/", 1);
        let b = RequestQueue::shared("HTTP://127.0.0.1:9/v1", 1);
        assert!(Arc::ptr_eq(&a, &b));
        let other = RequestQueue::shared("http://127.0.0.1:10/v1", 1);
        assert!(!Arc::ptr_eq(&a, &other));
        assert_eq!(RequestQueue::shared("http://x", 0).slots(), 1);
    }

    #[tokio::test]
    async fn a_second_request_waits_for_the_first() {
        let queue = RequestQueue::shared("http://127.0.0.1:11/one-slot", 1);
        let first = queue.try_acquire().expect("free");
        assert!(queue.try_acquire().is_none());
        let waiter = {
            let queue = Arc::clone(&queue);
            tokio::spawn(async move {
                let _slot = queue.acquire().await;
            })
        };
        tokio::time::timeout(Duration::from_secs(5), async {
            while queue.waiting() == 0 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .unwrap();
        assert!(!waiter.is_finished());
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(queue.waiting(), 0);
    }
}
