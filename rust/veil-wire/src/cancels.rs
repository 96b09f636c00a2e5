//! Cancel requests for statements that run on their connection's own thread.
//!
//! Each connection runs its statements inline on a thread of its own
//! (`server`), so pgwire's cancellation (dropping the statement's future)
//! cannot reach one that is running: nothing polls the future until it
//! returns. A cancel request is therefore also delivered here, by the process
//! id and secret key the connection was given: its session is told to stop
//! (`Session::cancel`, on a thread of its own, as it may need locks the
//! statement holds), and if the statement then fails, the client sees the
//! cancellation (SQLSTATE 57014), as PostgreSQL reports it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;

use crate::engine::Session;

/// A connection's session, as a cancel request reaches it.
pub struct Running {
    session: Weak<dyn Session>,
    requested: AtomicBool,
}

impl Running {
    /// A statement starts: a request made before it is not for it.
    pub fn start(&self) {
        self.requested.store(false, Ordering::Release);
    }

    /// Whether a cancel request came while the statement ran.
    pub fn requested(&self) -> bool {
        self.requested.load(Ordering::Acquire)
    }
}

/// The server's connections by process id and secret key.
#[derive(Default)]
pub struct Cancels {
    by_key: Mutex<HashMap<(i32, Bytes), Weak<Running>>>,
}

impl Cancels {
    /// Make `session` reachable by `pid` and `key`; the connection holds what comes back
    /// (when it ends, its entry goes).
    pub fn register(&self, pid: i32, key: Bytes, session: &Arc<dyn Session>) -> Arc<Running> {
        let running = Arc::new(Running {
            session: Arc::downgrade(session),
            requested: AtomicBool::new(false),
        });
        let mut by_key = self.by_key.lock().unwrap();
        if by_key.len() >= 64 {
            by_key.retain(|_, r| r.strong_count() > 0); // connections gone since
        }
        by_key.insert((pid, key), Arc::downgrade(&running));
        running
    }

    /// A cancel request for `pid` and `key`: that connection's statement is told to stop.
    pub fn cancel(&self, pid: i32, key: Bytes) {
        let found = self.by_key.lock().unwrap().get(&(pid, key)).cloned();
        let Some(running) = found.and_then(|r| r.upgrade()) else {
            return; // no such connection (or no statement run on it yet)
        };
        running.requested.store(true, Ordering::Release);
        if let Some(session) = running.session.upgrade() {
            std::thread::spawn(move || session.cancel());
        }
    }
}
