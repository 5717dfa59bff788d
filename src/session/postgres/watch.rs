//! Learning of other daemons' writes: one connection `LISTEN`s on [`CHANNEL`]; every write
//! commits with a notification `<version> <session id>`. Each open session holds an
//! [`Interest`] that remembers the newest version notified for it, so a read knows without a
//! query whether anything changed since it last looked. Whenever the listener is not
//! connected (at start, after the database restarted) nothing is trusted: every read queries,
//! and after each (re)connect every interest is marked changed once, for the notifications
//! that were missed meanwhile.
//!
//! A session can also be *followed*: [`Interest::signal`] wakes whoever waits on it at every
//! notification for the session and at every reconnect, so a daemon reads (and tells its
//! client about) another daemon's appends without waiting for a request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;

use crate::session::changes::ChangeSignal;

/// The notification channel.
pub(crate) const CHANNEL: &str = "compactd_sessions";

#[derive(Default)]
pub(crate) struct Watch {
    /// The listener is connected and listening.
    live: AtomicBool,
    /// Bumped after each (re)connect: a session that last looked at another epoch queries.
    epoch: AtomicU64,
    sessions: Mutex<HashMap<String, Weak<Notified>>>,
}

/// The newest version notified for one session, and the wake-up of its follower.
#[derive(Default)]
struct Notified {
    version: AtomicU64,
    /// Shared with the session's [`ChangeSignal`].
    wake: Arc<tokio::sync::Notify>,
}

/// One open session's view of the notifications; dropping it stops recording them.
pub(crate) struct Interest {
    watch: Arc<Watch>,
    notified: Arc<Notified>,
    /// The epoch at the last [`Interest::mark_seen`].
    epoch: u64,
    /// The version this session holds.
    seen: u64,
}

impl std::fmt::Debug for Interest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interest")
            .field("seen", &self.seen)
            .finish()
    }
}

impl Watch {
    pub(crate) fn interest(self: &Arc<Self>, id: &str) -> Interest {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.retain(|_, w| w.strong_count() > 0);
        let notified = match sessions.get(id).and_then(Weak::upgrade) {
            Some(n) => n,
            None => {
                let n = Arc::new(Notified::default());
                sessions.insert(id.to_owned(), Arc::downgrade(&n));
                n
            }
        };
        Interest {
            watch: Arc::clone(self),
            notified,
            // Read before the load that follows: a reconnect meanwhile is noticed.
            epoch: self.epoch.load(Ordering::Acquire),
            seen: 0,
        }
    }

    fn notify(&self, payload: &str) {
        let Some((version, id)) = payload.split_once(' ') else {
            return;
        };
        let Ok(version) = version.parse::<u64>() else {
            return;
        };
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = sessions.get(id).and_then(Weak::upgrade) {
            n.version.fetch_max(version, Ordering::AcqRel);
            n.wake.notify_one();
        }
    }

    /// After a (re)connect: notifications may have been missed, so every follower looks.
    fn wake_all(&self) {
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        for n in sessions.values().filter_map(Weak::upgrade) {
            n.wake.notify_one();
        }
    }
}

impl Interest {
    /// Whether the database may hold changes this session has not seen.
    pub(crate) fn may_have_changed(&self) -> bool {
        !self.watch.live.load(Ordering::Acquire)
            || self.watch.epoch.load(Ordering::Acquire) != self.epoch
            || self.notified.version.load(Ordering::Acquire) > self.seen
    }

    /// The session now holds `version`, read with the listener in the epoch read before.
    pub(crate) fn mark_seen(&mut self, version: u64, epoch: u64) {
        self.seen = version;
        self.epoch = epoch;
    }

    /// The signal that wakes at this session's notifications and at reconnects.
    pub(crate) fn signal(&self) -> ChangeSignal {
        ChangeSignal::new(Arc::clone(&self.notified.wake))
    }

    /// The current epoch, read before a query so a reconnect during it is not hidden.
    pub(crate) fn epoch_now(&self) -> u64 {
        self.watch.epoch.load(Ordering::Acquire)
    }
}

/// Keeps one listening connection up for the store's lifetime, reconnecting with back-off.
pub(super) async fn listen(config: tokio_postgres::Config, watch: Arc<Watch>, target: String) {
    let mut delay = Duration::from_millis(50);
    loop {
        match config.connect(tokio_postgres::NoTls).await {
            Ok((client, mut connection)) => {
                let (tx, mut rx) = futures::channel::mpsc::unbounded();
                let messages =
                    futures::stream::poll_fn(move |cx| connection.poll_message(cx)).map(Ok);
                let forward = tokio::spawn(messages.forward(tx));
                match client.batch_execute(&format!("LISTEN {CHANNEL}")).await {
                    Ok(()) => {
                        watch.epoch.fetch_add(1, Ordering::AcqRel);
                        watch.live.store(true, Ordering::Release);
                        watch.wake_all();
                        tracing::debug!(%target, "listening for other daemons' writes");
                        delay = Duration::from_millis(50);
                        while let Some(message) = rx.next().await {
                            match message {
                                Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                                    watch.notify(n.payload());
                                }
                                Ok(_) => {}
                                Err(e) => {
                                    tracing::warn!(%target, error = %e, "the listener lost its connection");
                                    break;
                                }
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(%target, error = %e, "cannot LISTEN");
                    }
                }
                watch.live.store(false, Ordering::Release);
                forward.abort();
                drop(client);
            }
            Err(e) => {
                tracing::debug!(%target, error = %e, "the listener cannot connect yet");
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}
