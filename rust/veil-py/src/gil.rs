//! The GIL on the wire server's connection threads.
//!
//! Each call into Python from a thread without a Python thread state makes one
//! and frees it again (a data stack mapped and unmapped, a gettid): 3-4 times a
//! pgbench transaction, ~5% of the serving process's CPU (issue 41). A
//! connection's thread therefore keeps the state its first call made until the
//! connection ends (`ConnectionThread`). The state is made on that first call,
//! never when the thread starts: a client in this very process may hold the GIL
//! while it waits for the server (psycopg's `cancel()` does), and a thread that
//! needed the GIL before reading the request would never serve it.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;

/// Set once the interpreter is finalizing (`atexit`): no thread takes the GIL again
/// to free its state (a thread that does then is ended by Python, which aborts Rust).
static FINALIZING: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Whether this thread keeps its Python state (a connection's thread).
    static KEEPS: Cell<bool> = const { Cell::new(false) };
    /// The state kept, once the thread's first call into Python made it.
    static KEPT: Cell<Option<(*mut ffi::PyThreadState, ffi::PyGILState_STATE)>> =
        const { Cell::new(None) };
}

/// `f` with the GIL, on a connection's thread with the Python state it keeps.
pub fn with_python<T>(f: impl for<'py> FnOnce(Python<'py>) -> T) -> T {
    if KEEPS.with(Cell::get) && KEPT.with(Cell::get).is_none() {
        // SAFETY: the interpreter runs (the server was started from Python); the GIL is
        // taken and let go at once, leaving this thread's state registered with it
        let kept = unsafe {
            let gil = ffi::PyGILState_Ensure();
            (ffi::PyEval_SaveThread(), gil)
        };
        KEPT.with(|k| k.set(Some(kept)));
    }
    Python::with_gil(f)
}

/// Held by a connection's thread for its whole life: the Python state its calls
/// make is kept, and freed when this drops (after the connection's session).
pub struct ConnectionThread;

impl ConnectionThread {
    pub fn new() -> Self {
        KEEPS.with(|k| k.set(true));
        ConnectionThread
    }
}

impl Drop for ConnectionThread {
    fn drop(&mut self) {
        KEEPS.with(|k| k.set(false));
        let Some((state, gil)) = KEPT.with(Cell::take) else {
            return;
        };
        if FINALIZING.load(Ordering::Acquire) {
            return; // the state goes with the interpreter
        }
        // SAFETY: the state is this thread's own, saved by `with_python`
        unsafe {
            ffi::PyEval_RestoreThread(state);
            ffi::PyGILState_Release(gil);
        }
    }
}

/// Whether the interpreter is finalizing (no call into Python may start).
pub fn finalizing() -> bool {
    FINALIZING.load(Ordering::Acquire)
}

/// Called at interpreter exit (registered with `atexit` by the first server).
#[pyfunction]
pub fn _wire_finalizing() {
    FINALIZING.store(true, Ordering::Release);
}
