//! PyO3 glue for `veil_wire`: a Python engine object behind the wire server.
//!
//! `WireServer(engine, listen, cert_pem, key_pem, trust, fd)` starts the server
//! on its own tokio runtime (a thread of its own) and returns once it listens;
//! `address` is where, `stop()` ends it. With `fd`, it accepts on that
//! listening socket, bound by the process that started this one and shared
//! with its other workers (`veil serve --workers N`, `veil.serve.workers`),
//! and `listen` is ignored. The engine is Python
//! (`veil.serve.engine`): `open(user, database)` gives a session with
//! `run(sql, params)`, `describe(sql, oids)`, `cancel()` and `close()`;
//! `verifier(user)` gives a SCRAM verifier. Every call into Python holds the
//! GIL only for the call; the protocol work runs without it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, RawFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::UNIX_EPOCH;

use pyo3::exceptions::{PyOSError, PyStopIteration};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use tokio::sync::watch;
use veil_wire::engine::{
    Batch, Batches, Column, Description, Engine, Field, Oid, Outcome, Param, ReadyBatches, Session,
    Verifier, WireError,
};
use veil_wire::server::{serve, Config, Listen, SCRAM_ITERATIONS};

use crate::gil::{finalizing, with_python, ConnectionThread};
use crate::point::{Answered, NativePoints, Registry};

/// A Python exception as a wire error: its `sqlstate`, `hint` and
/// `position` attributes when it has them (`veil.serve.errors.WireError`).
fn wire_error(py: Python<'_>, err: PyErr) -> WireError {
    let value = err.value(py);
    let attr = |name: &str| value.getattr(name).ok().filter(|v| !v.is_none());
    let code = attr("sqlstate")
        .and_then(|v| v.extract::<String>().ok())
        .unwrap_or_else(|| "XX000".to_owned());
    let message = attr("message")
        .and_then(|v| v.extract::<String>().ok())
        .unwrap_or_else(|| value.to_string());
    WireError {
        code,
        message,
        hint: attr("hint").and_then(|v| v.extract().ok()),
        position: attr("position").and_then(|v| v.extract().ok()),
    }
}

fn fields(list: &Bound<'_, PyAny>) -> PyResult<Vec<Field>> {
    list.extract::<Vec<(String, Oid)>>().map(|v| {
        v.into_iter()
            .map(|(name, oid)| Field { name, oid })
            .collect()
    })
}

fn words(raw: &[u8]) -> Vec<i64> {
    raw.chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

struct PyBatches(Py<PyAny>);

/// One batch as the engine gives it: `(rows, [(raw_bytes, offset, offsets, data,
/// validity), ...])`.
fn batch(item: &Bound<'_, PyAny>) -> PyResult<Batch> {
    let (rows, raw): (usize, Vec<Bound<'_, PyAny>>) = item.extract()?;
    let mut columns = Vec::with_capacity(raw.len());
    for column in raw {
        type Parts<'a> = (bool, usize, Vec<u8>, Vec<u8>, Option<Vec<u8>>);
        let (raw_bytes, offset, offsets, data, validity): Parts = column.extract()?;
        columns.push(Column {
            raw_bytes,
            offset,
            offsets: words(&offsets),
            data,
            validity,
        });
    }
    Ok(Batch { rows, columns })
}

impl Batches for PyBatches {
    fn next_batch(&mut self) -> Result<Option<Batch>, WireError> {
        with_python(|py| {
            let item = match self.0.bind(py).call_method0("__next__") {
                Ok(item) => item,
                Err(err) if err.is_instance_of::<PyStopIteration>(py) => return Ok(None),
                Err(err) => return Err(wire_error(py, err)),
            };
            batch(&item).map(Some).map_err(|e| wire_error(py, e))
        })
    }
}

/// A result's batches: taken at once when the engine made them whole (a list), else
/// asked for one at a time.
fn batches(source: Bound<'_, PyAny>) -> PyResult<Box<dyn Batches>> {
    if let Ok(list) = source.downcast::<PyList>() {
        let made = list
            .iter()
            .map(|item| batch(&item))
            .collect::<PyResult<_>>()?;
        return Ok(Box::new(ReadyBatches::new(made)));
    }
    Ok(Box::new(PyBatches(source.unbind())))
}

fn outcome(item: &Bound<'_, PyAny>) -> PyResult<Outcome> {
    let kind: String = item.get_item(0)?.extract()?;
    Ok(match kind.as_str() {
        "rows" => Outcome::Rows {
            fields: fields(&item.get_item(1)?)?,
            batches: batches(item.get_item(2)?)?,
            tag: if item.len()? > 3 {
                item.get_item(3)?.extract()?
            } else {
                None
            },
        },
        "copy_in" => Outcome::CopyIn {
            columns: item.get_item(1)?.extract()?,
        },
        "copy_out" => Outcome::CopyOut {
            columns: item.get_item(1)?.extract()?,
            batches: Box::new(PyBatches(item.get_item(2)?.unbind())),
        },
        "command" => Outcome::Command {
            tag: item.get_item(1)?.extract()?,
            rows: item.get_item(2)?.extract()?,
            status: if item.len()? > 3 {
                item.get_item(3)?.extract()?
            } else {
                Vec::new()
            },
        },
        _ => Outcome::Empty,
    })
}

/// A connection's session: the Python `WireSession`, and the descriptions it said
/// stay the same until the design file changes, by statement and parameter types,
/// with that file's modification time when described (a Describe before each Execute
/// of a prepared query then costs no call into Python).
struct PySession {
    session: Py<PyAny>,
    design: Option<PathBuf>,
    described: Mutex<HashMap<Statement, (u128, Description)>>,
    /// The point statements answered without Python (`veil.serve.native`), if any.
    native: Option<Arc<Registry>>,
}

/// A statement's text and its parameters' types, as a Describe names them.
type Statement = (String, Vec<Oid>);

// statements whose descriptions a connection keeps; past it, they start again
const DESCRIBED: usize = 256;

impl PySession {
    fn new(session: Bound<'_, PyAny>) -> Self {
        let design = session
            .getattr("design_path")
            .and_then(|p| p.extract::<String>())
            .ok()
            .map(PathBuf::from);
        let native = session.getattr("native_points").ok().and_then(|n| {
            n.downcast::<NativePoints>()
                .ok()
                .map(|n| n.get().registry.clone())
        });
        PySession {
            session: session.unbind(),
            design,
            described: Mutex::new(HashMap::new()),
            native,
        }
    }

    /// The design file's modification time (0 if it is not there), as the session's
    /// own caches read it.
    fn design_stamp(&self) -> Option<u128> {
        let path = self.design.as_ref()?;
        Some(match std::fs::metadata(path).and_then(|m| m.modified()) {
            Ok(time) => time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos()),
            Err(_) => 0,
        })
    }
}

impl Session for PySession {
    fn run(&self, sql: &str, params: &[Param]) -> Result<Vec<Outcome>, WireError> {
        if let Some(native) = self.native.as_ref() {
            let answered = if params.is_empty() {
                native.answer_simple(sql)
            } else {
                native.answer(sql, params)
            };
            match answered {
                Some(Answered::Rows(outcome)) => return Ok(vec![outcome]),
                Some(Answered::Failed { code, message }) => {
                    // the session's transaction fails with it, as for its own statements
                    return Err(with_python(|py| {
                        let failed = self
                            .session
                            .bind(py)
                            .call_method1("native_failed", (code, message, sql));
                        match failed {
                            Ok(_) => WireError::internal("a native statement failed"),
                            Err(err) => wire_error(py, err),
                        }
                    }));
                }
                None => {}
            }
        }
        with_python(|py| {
            let args: Vec<(Option<&str>, Oid)> =
                params.iter().map(|p| (p.text.as_deref(), p.oid)).collect();
            let result = self.session.bind(py).call_method1("run", (sql, args));
            result
                .and_then(|items| {
                    items
                        .try_iter()?
                        .map(|item| outcome(&item?))
                        .collect::<PyResult<Vec<_>>>()
                })
                .map_err(|e| wire_error(py, e))
        })
    }

    fn describe(&self, sql: &str, param_oids: &[Oid]) -> Result<Description, WireError> {
        // read before the session describes: a design changed meanwhile leaves an older
        // time beside the newer description, which the next Describe asks for again
        let stamp = self.design_stamp();
        let key = (sql.to_owned(), param_oids.to_vec());
        if let Some(stamp) = stamp {
            let kept = self.described.lock().unwrap();
            if let Some((when, description)) = kept.get(&key) {
                if *when == stamp {
                    return Ok(description.clone());
                }
            }
        }
        let (description, keep) = with_python(|py| {
            let found = self
                .session
                .bind(py)
                .call_method1("describe", (sql, param_oids.to_vec()));
            found
                .and_then(|d| {
                    let keep = d.len()? > 2 && d.get_item(2)?.extract::<bool>()?;
                    let description = Description {
                        params: d.get_item(0)?.extract()?,
                        fields: fields(&d.get_item(1)?)?,
                    };
                    Ok((description, keep))
                })
                .map_err(|e| wire_error(py, e))
        })?;
        if let (Some(stamp), true) = (stamp, keep) {
            let mut kept = self.described.lock().unwrap();
            if kept.len() >= DESCRIBED {
                kept.clear();
            }
            kept.insert(key, (stamp, description.clone()));
        }
        Ok(description)
    }

    fn cancel(&self) {
        with_python(|py| {
            let _ = self.session.bind(py).call_method0("cancel");
        })
    }

    fn copy_in(&self, data: Vec<u8>) -> Result<usize, WireError> {
        with_python(|py| {
            let found = self
                .session
                .bind(py)
                .call_method1("copy_in", (PyBytes::new(py, &data),));
            found
                .and_then(|rows| rows.extract::<usize>())
                .map_err(|e| wire_error(py, e))
        })
    }

    fn copy_abort(&self) {
        with_python(|py| {
            let _ = self.session.bind(py).call_method0("copy_abort");
        })
    }
}

impl Drop for PySession {
    fn drop(&mut self) {
        if finalizing() {
            return; // the interpreter is going: nothing to close in it
        }
        with_python(|py| {
            let _ = self.session.bind(py).call_method0("close");
        })
    }
}

struct PyEngine(Py<PyAny>);

impl Engine for PyEngine {
    fn open(&self, user: &str, database: &str) -> Result<Box<dyn Session>, WireError> {
        with_python(|py| {
            self.0
                .bind(py)
                .call_method1("open", (user, database))
                .map(|s| Box::new(PySession::new(s)) as Box<dyn Session>)
                .map_err(|e| wire_error(py, e))
        })
    }

    fn verifier(&self, user: &str) -> Result<Option<Verifier>, WireError> {
        with_python(|py| {
            let found = self.0.bind(py).call_method1("verifier", (user,));
            found
                .and_then(|v| v.extract::<Option<(Vec<u8>, Vec<u8>)>>())
                .map(|v| {
                    v.map(|(salt, salted_password)| Verifier {
                        salt,
                        salted_password,
                        iterations: SCRAM_ITERATIONS,
                    })
                })
                .map_err(|e| wire_error(py, e))
        })
    }
}

/// A running server: its runtime thread and the switch that stops it.
#[pyclass(module = "veil._native")]
pub struct WireServer {
    #[pyo3(get)]
    address: String,
    stop: watch::Sender<bool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[pymethods]
impl WireServer {
    #[new]
    #[pyo3(signature = (engine, listen, cert_pem=None, key_pem=None, trust=false, fd=None))]
    fn new(
        py: Python<'_>,
        engine: Py<PyAny>,
        listen: &str,
        cert_pem: Option<Bound<'_, PyBytes>>,
        key_pem: Option<Bound<'_, PyBytes>>,
        trust: bool,
        fd: Option<RawFd>,
    ) -> PyResult<Self> {
        static AT_EXIT: std::sync::Once = std::sync::Once::new();
        let mut registered = Ok(());
        AT_EXIT.call_once(|| {
            let hook = wrap_pyfunction!(crate::gil::_wire_finalizing, py);
            registered = hook.and_then(|hook| {
                py.import("atexit")?.call_method1("register", (hook,))?;
                Ok(())
            });
        });
        registered?;
        let listen = match fd {
            // SAFETY: the caller hands over a listening TCP socket it inherited for this
            // server alone (`veil.serve.workers`) and never uses or closes it itself; the
            // server owns it from here and closes it when it stops.
            Some(fd) => Listen::Shared(unsafe { std::net::TcpListener::from_raw_fd(fd) }),
            None => Listen::Address(
                listen
                    .parse()
                    .map_err(|_| PyOSError::new_err(format!("not an address:port: {listen}")))?,
            ),
        };
        let tls = match (cert_pem, key_pem) {
            (Some(c), Some(k)) => Some((c.as_bytes().to_vec(), k.as_bytes().to_vec())),
            _ => None,
        };
        let config = Config {
            listen,
            tls,
            trust,
            thread_start: Some(Arc::new(|| Box::new(ConnectionThread::new()))),
        };
        let engine: Arc<dyn Engine> = Arc::new(PyEngine(engine));
        let (stop, stopped) = watch::channel(false);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<SocketAddr, WireError>>();
        let thread = std::thread::Builder::new()
            .name("veil-serve".to_owned())
            .spawn(move || {
                // it only accepts: each connection has a thread and a runtime of its own
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(WireError::internal(e.to_string())));
                        return;
                    }
                };
                let ready = ready_tx.clone();
                let served = runtime.block_on(serve(
                    engine,
                    config,
                    move |addr| {
                        let _ = ready.send(Ok(addr));
                    },
                    stopped,
                ));
                if let Err(e) = served {
                    let _ = ready_tx.send(Err(e));
                }
                // open connections end with the runtime: their tasks (and sessions) are dropped
                runtime.shutdown_timeout(std::time::Duration::from_secs(5));
            })
            .map_err(|e| PyOSError::new_err(e.to_string()))?;
        let bound = py
            .allow_threads(move || ready_rx.recv())
            .map_err(|_| PyOSError::new_err("the wire server failed to start"))?
            .map_err(|e| PyOSError::new_err(e.message))?;
        Ok(WireServer {
            address: bound.to_string(),
            stop,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Stop listening and close every connection; returns when done.
    fn stop(&self, py: Python<'_>) {
        let _ = self.stop.send(true);
        let thread = self.thread.lock().unwrap().take();
        if let Some(thread) = thread {
            py.allow_threads(|| {
                let _ = thread.join();
            });
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<WireServer>()
}
