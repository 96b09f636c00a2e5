//! What the wire server asks of the engine behind it.
//!
//! The server speaks the protocol; an [`Engine`] opens one [`Session`] per
//! connection and answers its SQL. Every call may block (the engine decrypts,
//! plans, talks to the database server), so the server makes them on tokio's
//! blocking pool, never on the tasks that move bytes.

use std::collections::VecDeque;

use thiserror::Error;

/// A PostgreSQL type OID (`pg_type.oid`).
pub type Oid = u32;

/// An error for the client: SQLSTATE, message, optional hint and 1-based
/// character position in the statement.
#[derive(Debug, Clone, Error)]
#[error("{code}: {message}")]
pub struct WireError {
    pub code: String,
    pub message: String,
    pub hint: Option<String>,
    pub position: Option<usize>,
}

impl WireError {
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        WireError {
            code: code.to_owned(),
            message: message.into(),
            hint: None,
            position: None,
        }
    }

    /// SQLSTATE XX000: a failure that is not the client's fault.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new("XX000", message)
    }
}

/// One result column as the client sees it.
#[derive(Debug, Clone)]
pub struct Field {
    pub name: String,
    pub oid: Oid,
}

/// A column of a batch: every value already in PostgreSQL's text form
/// (`Text`), or raw bytes for `bytea` (`Bytes`), in Arrow's layout: value `i`
/// is `data[offsets[offset+i]..offsets[offset+i+1]]`, NULL where bit
/// `offset+i` of `validity` is 0.
#[derive(Debug, Clone)]
pub struct Column {
    pub raw_bytes: bool,
    pub offset: usize,
    pub offsets: Vec<i64>,
    pub data: Vec<u8>,
    pub validity: Option<Vec<u8>>,
}

impl Column {
    pub fn value(&self, row: usize) -> Option<&[u8]> {
        let i = self.offset + row;
        if let Some(bits) = &self.validity {
            if bits[i / 8] & (1 << (i % 8)) == 0 {
                return None;
            }
        }
        let (start, end) = (self.offsets[i] as usize, self.offsets[i + 1] as usize);
        Some(&self.data[start..end])
    }
}

/// Rows of a result, column by column.
#[derive(Debug, Clone)]
pub struct Batch {
    pub rows: usize,
    pub columns: Vec<Column>,
}

/// Yields a result's batches one at a time (the result is never turned
/// into wire rows whole).
pub trait Batches: Send {
    fn next_batch(&mut self) -> Result<Option<Batch>, WireError>;

    /// Every batch at once, if the engine made them all already (a point
    /// query's few rows): the server then sends them without asking the
    /// engine again. `None`: ask `next_batch`.
    fn take_ready(&mut self) -> Option<Vec<Batch>> {
        None
    }

    /// The rows of the batches made already (what an audit line of a result made
    /// whole counts); 0 if none are.
    fn ready_rows(&self) -> usize {
        0
    }
}

/// A result whose batches the engine made whole.
pub struct ReadyBatches(Option<VecDeque<Batch>>);

impl ReadyBatches {
    pub fn new(batches: Vec<Batch>) -> Self {
        ReadyBatches(Some(batches.into()))
    }
}

impl Batches for ReadyBatches {
    fn next_batch(&mut self) -> Result<Option<Batch>, WireError> {
        Ok(self.0.as_mut().and_then(VecDeque::pop_front))
    }

    fn take_ready(&mut self) -> Option<Vec<Batch>> {
        self.0.take().map(Vec::from)
    }

    fn ready_rows(&self) -> usize {
        self.0
            .as_ref()
            .map_or(0, |batches| batches.iter().map(|b| b.rows).sum())
    }
}

/// What one statement did.
pub enum Outcome {
    Rows {
        fields: Vec<Field>,
        batches: Box<dyn Batches>,
        /// The command tag when rows come from a command (`INSERT ... RETURNING`:
        /// `INSERT 0`, completed with the row count); `None`: `SELECT`.
        tag: Option<String>,
    },
    /// A command: its tag (`INSERT 0 3`'s `INSERT`) and row count, if any, and the
    /// reported parameters it changed (`SET TimeZone`: a `ParameterStatus` each).
    Command {
        tag: String,
        rows: Option<usize>,
        status: Vec<(String, String)>,
    },
    /// `COPY ... FROM STDIN`: the client now sends the rows (text format),
    /// which go to [`Session::copy_in`] whole.
    CopyIn {
        columns: usize,
    },
    /// `COPY ... TO STDOUT`: each value of the batches' one column is a row's line.
    CopyOut {
        columns: usize,
        batches: Box<dyn Batches>,
    },
    Empty,
}

/// A bound parameter: its text form (binary ones are decoded by the server
/// first) and the type the client gave it (0: unspecified).
#[derive(Debug, Clone)]
pub struct Param {
    pub text: Option<String>,
    pub oid: Oid,
}

/// A statement's description before it runs.
#[derive(Debug, Clone)]
pub struct Description {
    pub params: Vec<Oid>,
    pub fields: Vec<Field>,
}

/// A stored SCRAM-SHA-256 verifier: the salt and the salted password
/// (PBKDF2-HMAC-SHA-256 of the password over `iterations`).
#[derive(Debug, Clone)]
pub struct Verifier {
    pub salt: Vec<u8>,
    pub salted_password: Vec<u8>,
    pub iterations: usize,
}

pub trait Session: Send + Sync {
    /// Run the statements of `sql` (several under the simple protocol) in order.
    fn run(&self, sql: &str, params: &[Param]) -> Result<Vec<Outcome>, WireError>;
    /// Parameter types and result columns of one statement, without running it.
    fn describe(&self, sql: &str, param_oids: &[Oid]) -> Result<Description, WireError>;
    /// Stop the statement running now, if any (a cancel request).
    fn cancel(&self);
    /// The data of the pending `COPY ... FROM STDIN`; returns the rows inserted.
    fn copy_in(&self, data: Vec<u8>) -> Result<usize, WireError>;
    /// The client gave up the pending `COPY ... FROM STDIN`.
    fn copy_abort(&self);
}

pub trait Engine: Send + Sync + 'static {
    fn open(&self, user: &str, database: &str) -> Result<Box<dyn Session>, WireError>;
    /// The user's verifier, or None for an unknown user.
    fn verifier(&self, user: &str) -> Result<Option<Verifier>, WireError>;
}
