//! Point queries the wire server answers without entering Python (issue 41).
//!
//! A prepared statement the session has planned as a verified template whose
//! answer is its fetched rows (`veil.session.templates`, `veil.exec.direct`)
//! is handed here as a [`Plan`] (`veil.serve.native`): the server statement,
//! where each parameter goes under which DET key, how each fetched column is
//! decrypted and written as text. Each Execute of that statement then parses
//! its parameters, encrypts them, runs the statement on the session's own
//! PostgreSQL connection (libpq under psycopg) and decrypts the rows, all
//! without the GIL.
//!
//! A plan runs only while everything it was made under holds: the design file
//! and the users file unchanged (their stamps, read before and after), the
//! session open for it (no failed transaction, no result streaming: the
//! session says so after each statement it runs) and its epoch (a SET, a
//! DEALLOCATE on the connection: the session moves it). Anything else, a value
//! a parameter's place does not take as planned, a value that does not open,
//! falls back to the session, which runs the statement as before; a read
//! changes nothing, so running it again there is safe.

mod audit;
mod libpq;
mod simple;
mod values;
mod write;

use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use veil_wire::engine::{Batch, Column, Field, Oid, Outcome, Param, ReadyBatches};

use crate::rowrnd::RowRndKey;
use crate::siv::SivBytes;
use libpq::{Connection, ServerError};
use values::{DetInt, Format, Opener};

/// Plans a connection keeps; past it, new ones are not kept.
const KEPT: usize = 64;

/// A file's stamp as the session reads it: modification time (ns) and size; None if
/// the file is not there.
fn stamp(path: &PathBuf) -> Option<(i128, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((
        i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        meta.size(),
    ))
}

/// Where a server parameter's value comes from.
enum ServerParam {
    /// Bytes sent as they are (a constant of the plan).
    Fixed(Vec<u8>),
    /// The DET ciphertext of the wire parameter `index` (an integer), as int8.
    DetInt { index: usize, det: DetInt },
}

/// What a wire parameter must be to take the plan: an integer in `[low, high]`
/// (`low > high`: text, taken as it comes).
struct WireParam {
    low: i64,
    high: i64,
}

/// A wire parameter's value as the plan takes it.
pub enum WireValue<'a> {
    Int(i64),
    Text(&'a str),
}

impl WireValue<'_> {
    fn int(&self) -> Option<i64> {
        match self {
            WireValue::Int(v) => Some(*v),
            WireValue::Text(_) => None,
        }
    }
}

/// One output column: the fetched column it decrypts and how.
struct Output {
    column: usize,
    opener: Opener,
    format: Format,
}

/// What a plan runs under: its epoch, the session's connection, the files whose
/// stamps it was made under.
struct Frame {
    epoch: u64,
    connection: Connection,
    design: (PathBuf, Option<(i128, u64)>),
    users: Option<(PathBuf, Option<(i128, u64)>)>,
}

impl Frame {
    fn current(&self) -> bool {
        stamp(&self.design.0) == self.design.1
            && self
                .users
                .as_ref()
                .is_none_or(|(path, at)| stamp(path) == *at)
    }
}

/// A server statement whose parameters come from the wire's integer parameters.
struct Statement {
    sql: CString,
    types: Vec<u32>,
    server_params: Vec<ServerParam>,
    wire_params: Vec<WireParam>,
}

impl Statement {
    /// The wire parameters as integers and the server parameters made of them; None if
    /// one is not an integer its place takes.
    fn bound<'a>(&self, params: &[Option<&'a str>]) -> Option<(Vec<WireValue<'a>>, Params)> {
        if params.len() != self.wire_params.len() {
            return None;
        }
        let mut values = Vec::with_capacity(params.len());
        for (text, want) in params.iter().zip(&self.wire_params) {
            let text = (*text)?;
            if want.low > want.high {
                values.push(WireValue::Text(text));
                continue;
            }
            let value = integer(text)?;
            if value < want.low || value > want.high {
                return None;
            }
            values.push(WireValue::Int(value));
        }
        let mut bound = Vec::with_capacity(self.server_params.len());
        for param in &self.server_params {
            bound.push(Some(match param {
                ServerParam::Fixed(bytes) => bytes.clone(),
                ServerParam::DetInt { index, det } => {
                    det.run(values[*index].int()?, true)?.to_be_bytes().to_vec()
                }
            }));
        }
        Some((values, bound))
    }
}

/// A point read.
struct Plan {
    frame: Frame,
    statement: Statement,
    outputs: Vec<Output>,
    row_id: Option<usize>,
    fields: Vec<Field>,
}

/// A kept plan: a point read or a point write.
enum Kept {
    Read(Plan),
    Write(write::WritePlan),
    Insert(write::InsertPlan),
}

/// A statement's binary parameters (None: NULL).
pub type Params = Vec<Option<Vec<u8>>>;

/// A result's rows, each value's text (None: NULL).
type Rows = Vec<Vec<Option<Vec<u8>>>>;

/// Plans by statement text and parameter types, each with its audit line if the
/// session keeps an audit log.
type Plans = HashMap<(String, Vec<Oid>), Arc<(Kept, Option<audit::AuditLine>)>>;

/// A plan's audit line from the session's two pre-rendered parts.
fn audit_line(parts: Option<(Vec<u8>, Vec<u8>)>) -> Option<audit::AuditLine> {
    parts.map(|(head, tail)| audit::AuditLine { head, tail })
}

/// The rows a run's outcome answered or changed.
fn rows_of(outcome: &Outcome) -> usize {
    match outcome {
        Outcome::Command { rows, .. } => rows.unwrap_or(0),
        Outcome::Rows { batches, .. } => batches.ready_rows(),
        _ => 0,
    }
}

/// Why a run did not answer.
enum Miss {
    /// The session runs it (nothing happened that it would not redo).
    Fallback,
    /// The server failed the statement: the session's transaction fails with it.
    Server(ServerError),
}

impl Plan {
    fn run(&self, params: &[Option<&str>]) -> Result<Outcome, Miss> {
        let (_, bound) = self.statement.bound(params).ok_or(Miss::Fallback)?;
        let (frame, statement) = (&self.frame, &self.statement);
        if !frame.current() || !frame.connection.usable() {
            return Err(Miss::Fallback);
        }
        let answer = frame
            .connection
            .query(&statement.sql, &statement.types, &bound)
            .map_err(Miss::Server)?;
        let batch = self.decrypted(&answer).ok_or(Miss::Fallback)?;
        if !frame.current() {
            return Err(Miss::Fallback); // a peel may have landed while it ran
        }
        let batches = if batch.rows == 0 { vec![] } else { vec![batch] };
        Ok(Outcome::Rows {
            fields: self.fields.clone(),
            batches: Box::new(ReadyBatches::new(batches)),
            tag: None,
        })
    }

    fn decrypted(&self, answer: &libpq::Answer<'_>) -> Option<Batch> {
        let rows = answer.rows();
        let types: Vec<u32> = (0..answer.columns())
            .map(|c| answer.binary_type(c))
            .collect::<Option<_>>()?;
        // each row's id, for the row-bound columns (read once, whatever they are)
        let ids = (0..rows)
            .map(|row| match self.row_id {
                None => Some(None),
                Some(at) => match values::stored(types[at], answer.value(row, at)?)? {
                    values::Stored::Int(id) => Some(Some(id as u64)),
                    values::Stored::Bytes(_) => None,
                },
            })
            .collect::<Option<Vec<_>>>()?;
        let mut columns = Vec::with_capacity(self.outputs.len());
        for output in &self.outputs {
            let oid = *types.get(output.column)?;
            let mut offsets = Vec::with_capacity(rows + 1);
            let mut data = Vec::new();
            let mut validity = vec![0u8; rows.div_ceil(8)];
            let mut nulls = false;
            offsets.push(0i64);
            for row in 0..rows {
                match answer.value(row, output.column) {
                    None => nulls = true,
                    Some(raw) => {
                        let plain = output.opener.open(&values::stored(oid, raw)?, ids[row])?;
                        output.format.write(&plain, &mut data)?;
                        validity[row / 8] |= 1 << (row % 8);
                    }
                }
                offsets.push(data.len() as i64);
            }
            columns.push(Column {
                raw_bytes: false,
                offset: 0,
                offsets,
                data,
                validity: nulls.then_some(validity),
            });
        }
        Some(Batch { rows, columns })
    }

    /// Run the statement once with `params`: the rows' text, to be compared with the
    /// session's own answer. Inside a transaction, under a savepoint,
    /// so that a failure here leaves the transaction as it was.
    fn check(&self, params: &[Option<&str>]) -> Result<Option<Rows>, String> {
        match guarded(&self.frame.connection, || self.run(params))? {
            None | Some(Err(Miss::Fallback)) => Ok(None),
            Some(Err(Miss::Server(error))) => Err(format!("{}: {}", error.code, error.message)),
            Some(Ok(Outcome::Rows { mut batches, .. })) => {
                let mut rows = Vec::new();
                while let Ok(Some(batch)) = batches.next_batch() {
                    for row in 0..batch.rows {
                        rows.push(
                            batch
                                .columns
                                .iter()
                                .map(|c| c.value(row).map(<[u8]>::to_vec))
                                .collect(),
                        );
                    }
                }
                Ok(Some(rows))
            }
            Some(Ok(_)) => Ok(None),
        }
    }
}

/// `run()` under a savepoint inside a transaction, so that a failure leaves the
/// transaction as it was; Ok(None) if the connection is in no state to try.
fn guarded<T>(
    connection: &Connection,
    run: impl FnOnce() -> Result<T, Miss>,
) -> Result<Option<Result<T, Miss>>, String> {
    let status = connection.transaction_status();
    let inside = status == libpq::TRANS_INTRANS;
    if !inside && status != libpq::TRANS_IDLE {
        return Ok(None);
    }
    let savepoint = |sql: &str| connection.command(&CString::new(sql).unwrap());
    if inside {
        savepoint("SAVEPOINT veil_native_check").map_err(|e| e.message)?;
    }
    let ran = run();
    if inside {
        if ran.is_err() {
            savepoint("ROLLBACK TO SAVEPOINT veil_native_check").map_err(|e| e.message)?;
        }
        savepoint("RELEASE SAVEPOINT veil_native_check").map_err(|e| e.message)?;
    }
    Ok(Some(ran))
}

/// PostgreSQL's integer input, strictly: an optional sign and ASCII digits (anything
/// else, spaces included, goes to the session, which reads it as it always has).
fn integer(text: &str) -> Option<i64> {
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// The plans of one wire connection and what they run under.
#[derive(Default)]
pub struct Registry {
    epoch: AtomicU64,
    open: AtomicBool,
    plans: Mutex<Plans>,
    runs: AtomicU64,
    /// The connection's named server statements, if its backend keeps them.
    prepared: Option<Arc<libpq::Prepared>>,
    /// The client directory's audit log, if the session keeps one.
    audit: Option<audit::AuditFile>,
}

/// What the wire server does with a statement the registry may answer.
pub enum Answered {
    Rows(Outcome),
    /// The server failed it: the session must learn so (its transaction fails).
    Failed {
        code: String,
        message: String,
    },
}

impl Registry {
    /// The answer of `sql` with `params`, if a current plan gives one.
    pub fn answer(&self, sql: &str, params: &[Param]) -> Option<Answered> {
        let texts: Vec<Option<&str>> = params.iter().map(|p| p.text.as_deref()).collect();
        let oids = params.iter().map(|p| p.oid).collect();
        self.answered(sql.to_owned(), oids, &texts)
    }

    /// The answer of a simple-protocol `sql` with its integers written in: the plan kept
    /// for its shape, those integers its untyped parameters (`simple`).
    pub fn answer_simple(&self, sql: &str) -> Option<Answered> {
        if !self.open.load(Ordering::Acquire) || self.plans.lock().unwrap().is_empty() {
            return None;
        }
        let (shape, values) = simple::integers(sql)?;
        let texts: Vec<Option<&str>> = values.iter().map(|v| Some(*v)).collect();
        self.answered(shape, vec![0; values.len()], &texts)
    }

    fn answered(&self, sql: String, oids: Vec<Oid>, texts: &[Option<&str>]) -> Option<Answered> {
        if !self.open.load(Ordering::Acquire) {
            return None;
        }
        let kept = self.plans.lock().unwrap().get(&(sql, oids)).cloned()?;
        let epoch = self.epoch.load(Ordering::Acquire);
        let started = (std::time::SystemTime::now(), std::time::Instant::now());
        let ran = match &kept.0 {
            Kept::Read(plan) if plan.frame.epoch == epoch => plan.run(texts),
            Kept::Write(plan) if plan.frame.epoch == epoch => plan.run(texts),
            Kept::Insert(plan) if plan.frame.epoch == epoch => plan.run(texts),
            _ => return None,
        };
        match ran {
            Ok(outcome) => {
                self.runs.fetch_add(1, Ordering::Relaxed);
                if let (Some(file), Some(line)) = (&self.audit, &kept.1) {
                    let seconds = started.1.elapsed().as_secs_f64();
                    line.record(file, started.0, seconds, rows_of(&outcome));
                }
                Some(Answered::Rows(outcome))
            }
            Err(Miss::Fallback) => None,
            Err(Miss::Server(error)) => Some(Answered::Failed {
                code: error.code,
                message: error.message,
            }),
        }
    }
}

/// A wire connection's native plans (`veil.serve.native`): the session makes one,
/// the wire server finds it as the session's `native_points`.
#[pyclass(frozen, module = "veil._native")]
pub struct NativePoints {
    pub registry: Arc<Registry>,
}

fn det_int(spec: &Bound<'_, PyAny>) -> PyResult<DetInt> {
    let kind: String = spec.get_item(0)?.extract()?;
    Ok(match kind.as_str() {
        "narrow" => DetInt::Narrow {
            narrow: spec.get_item(1)?.extract()?,
            wide: spec.get_item(2)?.extract()?,
            bits: spec.get_item(3)?.extract()?,
        },
        "wide" => DetInt::Wide(spec.get_item(1)?.extract()?),
        _ => return Err(PyValueError::new_err(format!("no DET integer form {kind}"))),
    })
}

fn opener(spec: &Bound<'_, PyAny>) -> PyResult<Opener> {
    let kind: String = spec.get_item(0)?.extract()?;
    Ok(match kind.as_str() {
        "rnd_word" => Opener::RndWord {
            key: spec.get_item(1)?.extract::<Py<RowRndKey>>()?,
            bits: spec.get_item(2)?.extract()?,
        },
        "rnd_fitted" => Opener::RndFitted {
            key: spec.get_item(1)?.extract()?,
            width: spec.get_item(2)?.extract()?,
            low: spec.get_item(3)?.extract()?,
            fit: spec.get_item(4)?.extract()?,
        },
        "rnd_bytes" => Opener::RndBytes(spec.get_item(1)?.extract()?),
        "det_int" => Opener::DetInt(det_int(&spec.get_item(1)?)?),
        "det_bytes" => Opener::DetBytes(spec.get_item(1)?.extract::<Py<SivBytes>>()?),
        "plain" => Opener::Plain,
        _ => return Err(PyValueError::new_err(format!("no opener {kind}"))),
    })
}

fn format(spec: &Bound<'_, PyAny>) -> PyResult<Format> {
    let kind: String = spec.get_item(0)?.extract()?;
    Ok(match kind.as_str() {
        "int" => Format::Int {
            bits: spec.get_item(1)?.extract()?,
        },
        "decimal" => Format::Decimal {
            scale: spec.get_item(1)?.extract()?,
        },
        "date" => Format::Date,
        "text" => Format::Text,
        _ => return Err(PyValueError::new_err(format!("no format {kind}"))),
    })
}

fn file_stamp(
    spec: Option<(String, Option<(i128, u64)>)>,
) -> Option<(PathBuf, Option<(i128, u64)>)> {
    spec.map(|(path, at)| (PathBuf::from(path), at))
}

/// A server statement from its parts as ``veil.session.native_plans`` gives them.
fn statement(
    sql: &str,
    server_params: &[Bound<'_, PyAny>],
    wire_params: Vec<(i64, i64)>,
) -> PyResult<Statement> {
    let mut types = Vec::with_capacity(server_params.len());
    let mut made = Vec::with_capacity(server_params.len());
    for spec in server_params {
        let kind: String = spec.get_item(0)?.extract()?;
        made.push(match kind.as_str() {
            "fixed" => {
                types.push(spec.get_item(2)?.extract()?);
                ServerParam::Fixed(spec.get_item(1)?.extract()?)
            }
            "det_int" => {
                types.push(values::INT8);
                ServerParam::DetInt {
                    index: spec.get_item(1)?.extract()?,
                    det: det_int(&spec.get_item(2)?)?,
                }
            }
            _ => return Err(PyValueError::new_err(format!("no server parameter {kind}"))),
        });
    }
    Ok(Statement {
        sql: CString::new(sql)?,
        types,
        server_params: made,
        wire_params: wire_params
            .into_iter()
            .map(|(low, high)| WireParam { low, high })
            .collect(),
    })
}

impl NativePoints {
    /// Keep `kept` for the statement `key`; false if the connection keeps enough.
    fn keep(&self, key: (String, Vec<Oid>), kept: Kept, audit: Option<audit::AuditLine>) -> bool {
        let mut plans = self.registry.plans.lock().unwrap();
        if plans.len() >= KEPT && !plans.contains_key(&key) {
            return false;
        }
        plans.insert(key, Arc::new((kept, audit)));
        true
    }

    fn frame(
        &self,
        libpq: &str,
        connection: usize,
        design: (String, Option<(i128, u64)>),
        users: Option<(String, Option<(i128, u64)>)>,
    ) -> PyResult<Frame> {
        Ok(Frame {
            epoch: self.registry.epoch.load(Ordering::Acquire),
            connection: Connection {
                libpq: libpq::load(libpq).map_err(PyOSError::new_err)?,
                conn: connection,
                prepared: self.registry.prepared.clone(),
            },
            design: file_stamp(Some(design)).unwrap(),
            users: file_stamp(users),
        })
    }
}

#[pymethods]
impl NativePoints {
    /// `statements`: the named statements of the session's server connection, which
    /// its backend keeps (None: every statement runs unnamed); `audit`: the path of the
    /// client directory's audit log, if the session keeps one.
    #[new]
    #[pyo3(signature = (statements=None, audit=None))]
    fn new(statements: Option<&ServerStatements>, audit: Option<&str>) -> PyResult<Self> {
        let audit = audit
            .map(audit::AuditFile::open)
            .transpose()
            .map_err(|e| PyOSError::new_err(format!("cannot open the audit log: {e}")))?;
        Ok(NativePoints {
            registry: Arc::new(Registry {
                prepared: statements.map(|s| s.inner.clone()),
                audit,
                ..Registry::default()
            }),
        })
    }

    /// Plans made before this are not run again (a SET, a DEALLOCATE).
    fn bump(&self) {
        self.registry.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether the session lets plans run now (no failed transaction, no stream).
    fn set_open(&self, open: bool) {
        self.registry.open.store(open, Ordering::Release);
    }

    /// Statements answered natively so far.
    #[getter]
    fn runs(&self) -> u64 {
        self.registry.runs.load(Ordering::Relaxed)
    }

    /// How many plans are kept.
    fn __len__(&self) -> usize {
        self.registry.plans.lock().unwrap().len()
    }

    /// Keep a point UPDATE's plan for `sql` with parameter types `oids`: its match (as
    /// a read's statement), the fetched column of the row ids, the UPDATE and what each
    /// of its parameters holds; `begin()` is the session's call before each run, `end()`
    /// after one outside a transaction.
    #[pyo3(signature = (sql, oids, libpq, connection, match_sql, match_params, wire_params, row_id, update_sql, update_types, update_params, begin, end, design, users, audit=None))]
    #[allow(clippy::too_many_arguments)]
    fn install_write(
        &self,
        sql: String,
        oids: Vec<Oid>,
        libpq: &str,
        connection: usize,
        match_sql: &str,
        match_params: Vec<Bound<'_, PyAny>>,
        wire_params: Vec<(i64, i64)>,
        row_id: usize,
        update_sql: &str,
        update_types: Vec<u32>,
        update_params: Vec<Bound<'_, PyAny>>,
        begin: Py<PyAny>,
        end: Py<PyAny>,
        design: (String, Option<(i128, u64)>),
        users: Option<(String, Option<(i128, u64)>)>,
        audit: Option<(Vec<u8>, Vec<u8>)>,
    ) -> PyResult<bool> {
        let plan = write::WritePlan {
            frame: self.frame(libpq, connection, design, users)?,
            matched: statement(match_sql, &match_params, wire_params)?,
            row_id,
            update: CString::new(update_sql)?,
            update_types,
            update_params: update_params
                .iter()
                .map(update_param)
                .collect::<PyResult<_>>()?,
            begin,
            end,
        };
        Ok(self.keep((sql, oids), Kept::Write(plan), audit_line(audit)))
    }

    /// Keep a one-row INSERT's plan for `sql` with parameter types `oids`: the server's
    /// INSERT, its parameters' types and what each holds; `begin()`/`end()` as for an
    /// UPDATE.
    #[pyo3(signature = (sql, oids, libpq, connection, insert_sql, insert_types, wire_params, values, begin, end, design, users, audit=None))]
    #[allow(clippy::too_many_arguments)]
    fn install_insert(
        &self,
        sql: String,
        oids: Vec<Oid>,
        libpq: &str,
        connection: usize,
        insert_sql: &str,
        insert_types: Vec<u32>,
        wire_params: Vec<(i64, i64)>,
        values: Vec<Bound<'_, PyAny>>,
        begin: Py<PyAny>,
        end: Py<PyAny>,
        design: (String, Option<(i128, u64)>),
        users: Option<(String, Option<(i128, u64)>)>,
        audit: Option<(Vec<u8>, Vec<u8>)>,
    ) -> PyResult<bool> {
        let mut made = statement(insert_sql, &[], wire_params)?;
        made.types = insert_types;
        let plan = write::InsertPlan {
            frame: self.frame(libpq, connection, design, users)?,
            statement: made,
            values: values.iter().map(insert_value).collect::<PyResult<_>>()?,
            begin,
            end,
        };
        Ok(self.keep((sql, oids), Kept::Insert(plan), audit_line(audit)))
    }

    /// Make a plan for `sql` with parameter types `oids`, run it once with `params`
    /// and keep it if its rows are `expected` (the session's own answer, as text);
    /// returns None when kept, else why not.
    #[pyo3(signature = (sql, oids, libpq, connection, server_sql, server_params, wire_params, outputs, row_id, fields, design, users, params, expected, audit=None))]
    #[allow(clippy::too_many_arguments)]
    fn install(
        &self,
        py: Python<'_>,
        sql: String,
        oids: Vec<Oid>,
        libpq: &str,
        connection: usize,
        server_sql: &str,
        server_params: Vec<Bound<'_, PyAny>>,
        wire_params: Vec<(i64, i64)>,
        outputs: Vec<(usize, Bound<'_, PyAny>, Bound<'_, PyAny>)>,
        row_id: Option<usize>,
        fields: Vec<(String, Oid)>,
        design: (String, Option<(i128, u64)>),
        users: Option<(String, Option<(i128, u64)>)>,
        params: Vec<Option<String>>,
        expected: Rows,
        audit: Option<(Vec<u8>, Vec<u8>)>,
    ) -> PyResult<Option<String>> {
        if self.registry.plans.lock().unwrap().len() >= KEPT {
            return Ok(Some("the connection keeps enough plans".into()));
        }
        let plan = Plan {
            frame: self.frame(libpq, connection, design, users)?,
            statement: statement(server_sql, &server_params, wire_params)?,
            outputs: outputs
                .iter()
                .map(|(column, open, how)| {
                    Ok(Output {
                        column: *column,
                        opener: opener(open)?,
                        format: format(how)?,
                    })
                })
                .collect::<PyResult<_>>()?,
            row_id,
            fields: fields
                .into_iter()
                .map(|(name, oid)| Field { name, oid })
                .collect(),
        };
        let texts: Vec<Option<&str>> = params.iter().map(Option::as_deref).collect();
        let checked = py.allow_threads(|| plan.check(&texts));
        match checked {
            Err(why) => Ok(Some(format!("the check run failed: {why}"))),
            Ok(None) => Ok(Some("the check run did not answer".into())),
            Ok(Some(rows)) if rows != expected => {
                Ok(Some("the check run answered otherwise".into()))
            }
            Ok(Some(_)) => {
                if self.keep((sql, oids), Kept::Read(plan), audit_line(audit)) {
                    Ok(None)
                } else {
                    Ok(Some("the connection keeps enough plans".into()))
                }
            }
        }
    }
}

fn update_param(spec: &Bound<'_, PyAny>) -> PyResult<write::UpdateParam> {
    use write::UpdateParam as P;
    let kind: String = spec.get_item(0)?.extract()?;
    let item = |i: usize| spec.get_item(i);
    Ok(match kind.as_str() {
        "new_id" => P::NewId,
        "old_id" => P::OldId,
        "reseal_word" => P::ResealWord {
            column: item(1)?.extract()?,
            key: item(2)?.extract()?,
            bits: item(3)?.extract()?,
        },
        "assigned_text" => P::AssignedText {
            param: item(1)?.extract()?,
            key: item(2)?.extract()?,
        },
        "reseal_bytes" => P::ResealBytes {
            column: item(1)?.extract()?,
            key: item(2)?.extract()?,
        },
        "assigned" => {
            let source = item(7)?;
            P::Assigned {
                key: item(1)?.extract()?,
                bits: item(2)?.extract()?,
                value: write::Assigned {
                    param: item(3)?.extract()?,
                    sign: item(4)?.extract()?,
                    source_bits: item(5)?.extract()?,
                    column_bits: item(6)?.extract()?,
                    source: if source.is_none() {
                        None
                    } else {
                        Some((
                            source.get_item(0)?.extract()?,
                            opener(&source.get_item(1)?)?,
                        ))
                    },
                },
            }
        }
        _ => return Err(PyValueError::new_err(format!("no UPDATE parameter {kind}"))),
    })
}

fn insert_value(spec: &Bound<'_, PyAny>) -> PyResult<write::InsertValue> {
    use write::InsertValue as V;
    let kind: String = spec.get_item(0)?.extract()?;
    let item = |i: usize| spec.get_item(i);
    Ok(match kind.as_str() {
        "new_id" => V::NewId,
        "int" => V::Int {
            param: item(1)?.extract()?,
            negated: item(2)?.extract()?,
            column_bits: item(3)?.extract()?,
            key: item(4)?.extract()?,
            bits: item(5)?.extract()?,
        },
        "text" => V::Text {
            param: item(1)?.extract()?,
            key: item(2)?.extract()?,
        },
        "fixed" => {
            let value = item(1)?;
            V::Fixed {
                value: if value.is_none() {
                    None
                } else if let Ok(v) = value.extract::<i64>() {
                    Some(values::Plain::Int(v))
                } else {
                    Some(values::Plain::Bytes(value.extract()?))
                },
                key: item(2)?.extract()?,
                bits: item(3)?.extract()?,
            }
        }
        "clock" => V::Clock {
            key: item(1)?.extract()?,
            bits: item(2)?.extract()?,
        },
        _ => return Err(PyValueError::new_err(format!("no INSERT value {kind}"))),
    })
}

/// The named server statements of one server connection (`libpq::Prepared`): its
/// backend says when they may be gone (`dropped`, after a statement that makes psycopg
/// send DEALLOCATE ALL); the connection's native plans prepare and run them.
#[pyclass(frozen, module = "veil._native")]
pub struct ServerStatements {
    inner: Arc<libpq::Prepared>,
}

#[pymethods]
impl ServerStatements {
    #[new]
    fn new() -> Self {
        ServerStatements {
            inner: Arc::new(libpq::Prepared::default()),
        }
    }

    /// The server may have dropped every prepared statement: each is prepared again
    /// before its next run.
    fn dropped(&self) {
        self.inner.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// How many times `dropped` was called.
    #[getter]
    fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativePoints>()?;
    m.add_class::<ServerStatements>()
}
