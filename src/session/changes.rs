//! The signal a store gives when other writers changed a session, so a follower can read
//! their entries at once instead of at the next request. It names no backend: PostgreSQL
//! makes one from its notifications (`postgres/watch.rs`); a file store gives none, and its
//! other writers are seen at the next refresh.

use std::sync::Arc;

use tokio::sync::Notify;

/// Wakes when the session may have changed in its store.
#[derive(Clone)]
pub struct ChangeSignal(Arc<Notify>);

impl std::fmt::Debug for ChangeSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChangeSignal")
    }
}

impl ChangeSignal {
    /// The signal that `wake` rings: the store calls `notify_one` on it at each change.
    pub(crate) fn new(wake: Arc<Notify>) -> Self {
        ChangeSignal(wake)
    }

    /// Waits for the next change since the last wait returned; several of them while
    /// nobody waits wake once.
    pub async fn changed(&self) {
        self.0.notified().await;
    }

    /// Wakes the waiter as a change would.
    pub(crate) fn poke(&self) {
        self.0.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn changes_while_nobody_waits_wake_the_next_wait_once() {
        let wake = Arc::new(Notify::new());
        let signal = ChangeSignal::new(Arc::clone(&wake));
        wake.notify_one();
        wake.notify_one();
        tokio::time::timeout(Duration::from_secs(5), signal.changed())
            .await
            .expect("a change before the wait wakes it");
        let again = tokio::time::timeout(Duration::from_millis(50), signal.changed()).await;
        assert!(again.is_err(), "two changes while nobody waited wake once");
        signal.poke();
        tokio::time::timeout(Duration::from_secs(5), signal.changed())
            .await
            .expect("a poke wakes as a change does");
    }
}
