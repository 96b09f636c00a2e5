//! The libpq functions a native point statement calls, found in the libpq that
//! psycopg already loaded (`dlopen` with `RTLD_NOLOAD`: never a second copy).
//!
//! A native statement runs on psycopg's own connection (its `PGconn`), so a
//! transaction the session began holds for it, as for any statement the
//! session sends; the session never uses the connection at the same time (a
//! wire connection runs one statement at a time).

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

pub type PgConn = c_void;
type PgResult = c_void;

/// `PGRES_COMMAND_OK`, `PGRES_TUPLES_OK` (`ExecStatusType`).
pub const COMMAND_OK: c_int = 1;
pub const TUPLES_OK: c_int = 2;
/// `PQTRANS_IDLE`, `PQTRANS_INTRANS` (`PGTransactionStatusType`).
pub const TRANS_IDLE: c_int = 0;
pub const TRANS_INTRANS: c_int = 2;
/// `CONNECTION_OK` (`ConnStatusType`).
const CONNECTION_OK: c_int = 0;
/// `PG_DIAG_SQLSTATE`, `PG_DIAG_MESSAGE_PRIMARY`.
const DIAG_SQLSTATE: c_int = b'C' as c_int;
const DIAG_MESSAGE: c_int = b'M' as c_int;

type ExecParams = unsafe extern "C" fn(
    *mut PgConn,
    *const c_char,
    c_int,
    *const u32,
    *const *const c_char,
    *const c_int,
    *const c_int,
    c_int,
) -> *mut PgResult;
type Exec = unsafe extern "C" fn(*mut PgConn, *const c_char) -> *mut PgResult;
type Prepare = unsafe extern "C" fn(
    *mut PgConn,
    *const c_char,
    *const c_char,
    c_int,
    *const u32,
) -> *mut PgResult;
type ExecPrepared = unsafe extern "C" fn(
    *mut PgConn,
    *const c_char,
    c_int,
    *const *const c_char,
    *const c_int,
    *const c_int,
    c_int,
) -> *mut PgResult;
type ClosePrepared = unsafe extern "C" fn(*mut PgConn, *const c_char) -> *mut PgResult;
type ResultInt = unsafe extern "C" fn(*const PgResult) -> c_int;
type FieldInt = unsafe extern "C" fn(*const PgResult, c_int) -> u32;
type CellInt = unsafe extern "C" fn(*const PgResult, c_int, c_int) -> c_int;
type CellValue = unsafe extern "C" fn(*const PgResult, c_int, c_int) -> *const c_char;
type ErrorField = unsafe extern "C" fn(*const PgResult, c_int) -> *const c_char;
type Clear = unsafe extern "C" fn(*mut PgResult);
type CmdTuples = unsafe extern "C" fn(*mut PgResult) -> *const c_char;
type ConnInt = unsafe extern "C" fn(*const PgConn) -> c_int;

/// The functions, resolved once per process.
pub struct Libpq {
    exec_params: ExecParams,
    exec: Exec,
    prepare: Prepare,
    exec_prepared: ExecPrepared,
    /// libpq 17 and later: a statement closed whether or not the server has it.
    close_prepared: Option<ClosePrepared>,
    status: ResultInt,
    ntuples: ResultInt,
    nfields: ResultInt,
    ftype: FieldInt,
    fformat: FieldInt,
    getvalue: CellValue,
    getlength: CellInt,
    getisnull: CellInt,
    error_field: ErrorField,
    clear: Clear,
    cmd_tuples: CmdTuples,
    transaction_status: ConnInt,
    connection_status: ConnInt,
}

static LIBPQ: OnceLock<Result<Libpq, String>> = OnceLock::new();

/// The libpq at `path` (already loaded by psycopg); an error says why not.
pub fn load(path: &str) -> Result<&'static Libpq, String> {
    LIBPQ
        .get_or_init(|| Libpq::open(path))
        .as_ref()
        .map_err(Clone::clone)
}

fn symbol<T: Copy>(library: *mut c_void, name: &str) -> Result<T, String> {
    let c_name = CString::new(name).map_err(|e| e.to_string())?;
    // SAFETY: `library` is a handle dlopen returned; dlsym only reads it
    let found = unsafe { libc::dlsym(library, c_name.as_ptr()) };
    if found.is_null() {
        return Err(format!("libpq has no {name}"));
    }
    // SAFETY: the symbol is libpq's function of that name, whose C signature `T` is
    assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
    Ok(unsafe { std::mem::transmute_copy(&found) })
}

impl Libpq {
    fn open(path: &str) -> Result<Self, String> {
        let c_path = CString::new(path).map_err(|e| e.to_string())?;
        // SAFETY: RTLD_NOLOAD only finds a library already loaded; it loads nothing
        let library = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if library.is_null() {
            return Err(format!("libpq {path} is not loaded in this process"));
        }
        Ok(Libpq {
            exec_params: symbol(library, "PQexecParams")?,
            exec: symbol(library, "PQexec")?,
            prepare: symbol(library, "PQprepare")?,
            exec_prepared: symbol(library, "PQexecPrepared")?,
            close_prepared: symbol(library, "PQclosePrepared").ok(),
            status: symbol(library, "PQresultStatus")?,
            ntuples: symbol(library, "PQntuples")?,
            nfields: symbol(library, "PQnfields")?,
            ftype: symbol(library, "PQftype")?,
            fformat: symbol(library, "PQfformat")?,
            getvalue: symbol(library, "PQgetvalue")?,
            getlength: symbol(library, "PQgetlength")?,
            getisnull: symbol(library, "PQgetisnull")?,
            error_field: symbol(library, "PQresultErrorField")?,
            clear: symbol(library, "PQclear")?,
            cmd_tuples: symbol(library, "PQcmdTuples")?,
            transaction_status: symbol(library, "PQtransactionStatus")?,
            connection_status: symbol(library, "PQstatus")?,
        })
    }
}

/// A statement's outcome: its rows (binary format) or the server's error.
pub struct Answer<'a> {
    libpq: &'a Libpq,
    result: *mut PgResult,
}

/// A server error: SQLSTATE and message.
#[derive(Debug, Clone)]
pub struct ServerError {
    pub code: String,
    pub message: String,
}

impl Answer<'_> {
    pub fn rows(&self) -> usize {
        // SAFETY: `result` is a live PGresult until drop
        unsafe { (self.libpq.ntuples)(self.result) }.max(0) as usize
    }

    pub fn columns(&self) -> usize {
        unsafe { (self.libpq.nfields)(self.result) }.max(0) as usize
    }

    /// The column's type OID, if it came in binary format.
    pub fn binary_type(&self, column: usize) -> Option<u32> {
        let c = column as c_int;
        unsafe {
            ((self.libpq.fformat)(self.result, c) == 1).then(|| (self.libpq.ftype)(self.result, c))
        }
    }

    /// The rows a command changed (`UPDATE 1`'s 1); None if it says none.
    pub fn changed(&self) -> Option<u64> {
        let text = unsafe { (self.libpq.cmd_tuples)(self.result) };
        if text.is_null() {
            return None;
        }
        unsafe { CStr::from_ptr(text) }.to_str().ok()?.parse().ok()
    }

    pub fn value(&self, row: usize, column: usize) -> Option<&[u8]> {
        let (r, c) = (row as c_int, column as c_int);
        // SAFETY: row and column are within the result's bounds (the caller's loops)
        unsafe {
            if (self.libpq.getisnull)(self.result, r, c) != 0 {
                return None;
            }
            let length = (self.libpq.getlength)(self.result, r, c).max(0) as usize;
            let start = (self.libpq.getvalue)(self.result, r, c) as *const u8;
            Some(std::slice::from_raw_parts(start, length))
        }
    }
}

impl Drop for Answer<'_> {
    fn drop(&mut self) {
        // SAFETY: cleared once, here
        unsafe { (self.libpq.clear)(self.result) }
    }
}

/// The named server statements native runs prepared on one connection.
///
/// The session's psycopg connection may drop every prepared statement on the
/// server: psycopg sends `DEALLOCATE ALL` after a ROLLBACK, a DROP or an ALTER
/// it ran (and the backend after a stale plan). The backend moves `generation`
/// whenever it runs such a statement (`veil.backends.postgres`), before any
/// native run can follow on the connection; a statement prepared under an older
/// generation is closed and prepared again before its next run. Unnamed
/// statements, as before, were parsed and planned by the server on every run.
#[derive(Default)]
pub struct Prepared {
    pub generation: AtomicU64,
    /// By statement text: its name and the generation it was prepared under.
    names: Mutex<HashMap<CString, (CString, u64)>>,
    /// Names handed out (each statement gets its own for the connection's life).
    made: AtomicU64,
}

/// Statements one connection keeps prepared; past it, the rest run unnamed.
const PREPARED: usize = 256;

/// psycopg's connection, borrowed for one statement at a time.
#[derive(Clone)]
pub struct Connection {
    pub libpq: &'static Libpq,
    pub conn: usize,
    /// Its named statements (None: every statement runs unnamed).
    pub prepared: Option<Arc<Prepared>>,
}

impl Connection {
    fn pointer(&self) -> *mut PgConn {
        self.conn as *mut PgConn
    }

    pub fn usable(&self) -> bool {
        unsafe { (self.libpq.connection_status)(self.pointer()) == CONNECTION_OK }
    }

    pub fn transaction_status(&self) -> c_int {
        unsafe { (self.libpq.transaction_status)(self.pointer()) }
    }

    fn finish(&self, result: *mut PgResult, wanted: c_int) -> Result<Answer<'static>, ServerError> {
        if result.is_null() {
            return Err(ServerError {
                code: "08006".into(),
                message: "the server connection failed".into(),
            });
        }
        let answer = Answer {
            libpq: self.libpq,
            result,
        };
        let status = unsafe { (self.libpq.status)(result) };
        if status == wanted {
            return Ok(answer);
        }
        let field = |which| {
            let text = unsafe { (self.libpq.error_field)(result, which) };
            if text.is_null() {
                None
            } else {
                Some(
                    unsafe { CStr::from_ptr(text) }
                        .to_string_lossy()
                        .into_owned(),
                )
            }
        };
        Err(ServerError {
            code: field(DIAG_SQLSTATE).unwrap_or_else(|| "XX000".into()),
            message: field(DIAG_MESSAGE)
                .unwrap_or_else(|| "the server refused the statement".into()),
        })
    }

    /// A statement without parameters or rows (SAVEPOINT, RELEASE).
    pub fn command(&self, sql: &CStr) -> Result<(), ServerError> {
        let result = unsafe { (self.libpq.exec)(self.pointer(), sql.as_ptr()) };
        self.finish(result, COMMAND_OK).map(drop)
    }

    /// `sql` with binary parameters of `types` (None: NULL), its rows in binary format;
    /// a named statement prepared once per generation (`Prepared`).
    pub fn query(
        &self,
        sql: &CStr,
        types: &[u32],
        params: &[Option<Vec<u8>>],
    ) -> Result<Answer<'static>, ServerError> {
        self.statement(sql, types, params, TUPLES_OK)
    }

    /// `sql` with binary parameters, a command without rows (an UPDATE).
    pub fn change(
        &self,
        sql: &CStr,
        types: &[u32],
        params: &[Option<Vec<u8>>],
    ) -> Result<Answer<'static>, ServerError> {
        self.statement(sql, types, params, COMMAND_OK)
    }

    /// The name `sql` runs under, prepared on the server now if it is not under the
    /// current generation; None: it runs unnamed (no cache, or the cache is full).
    fn prepared_name(&self, sql: &CStr, types: &[u32]) -> Result<Option<CString>, ServerError> {
        let Some(prepared) = self.prepared.as_ref() else {
            return Ok(None);
        };
        let generation = prepared.generation.load(Ordering::Acquire);
        let mut names = prepared.names.lock().unwrap();
        let known = names.get(sql).cloned();
        if let Some((name, at)) = &known {
            if *at == generation {
                return Ok(Some(name.clone()));
            }
        }
        let name = match (known, self.libpq.close_prepared) {
            // the server may still hold it (the generation moved without a DEALLOCATE)
            (Some((name, _)), Some(close)) => {
                let closed = unsafe { close(self.pointer(), name.as_ptr()) };
                self.finish(closed, COMMAND_OK)?;
                name
            }
            _ => {
                if names.len() >= PREPARED
                    || prepared.made.load(Ordering::Relaxed) >= 4 * PREPARED as u64
                {
                    return Ok(None);
                }
                let n = prepared.made.fetch_add(1, Ordering::Relaxed);
                CString::new(format!("veil_point_{n}")).expect("no NUL in a number")
            }
        };
        // SAFETY: the strings and the types array live until the call returns
        let result = unsafe {
            (self.libpq.prepare)(
                self.pointer(),
                name.as_ptr(),
                sql.as_ptr(),
                types.len() as c_int,
                types.as_ptr(),
            )
        };
        if let Err(err) = self.finish(result, COMMAND_OK) {
            names.remove(sql);
            return Err(err);
        }
        names.insert(sql.to_owned(), (name.clone(), generation));
        Ok(Some(name))
    }

    fn statement(
        &self,
        sql: &CStr,
        types: &[u32],
        params: &[Option<Vec<u8>>],
        wanted: c_int,
    ) -> Result<Answer<'static>, ServerError> {
        let name = self.prepared_name(sql, types)?;
        let pointers: Vec<*const c_char> = params
            .iter()
            .map(|p| {
                p.as_ref()
                    .map_or(std::ptr::null(), |v| v.as_ptr() as *const c_char)
            })
            .collect();
        let lengths: Vec<c_int> = params
            .iter()
            .map(|p| p.as_ref().map_or(0, |v| v.len() as c_int))
            .collect();
        let formats: Vec<c_int> = vec![1; params.len()];
        // SAFETY: the arrays live until the call returns; libpq copies what it sends
        let result = unsafe {
            if let Some(name) = &name {
                (self.libpq.exec_prepared)(
                    self.pointer(),
                    name.as_ptr(),
                    params.len() as c_int,
                    pointers.as_ptr(),
                    lengths.as_ptr(),
                    formats.as_ptr(),
                    1,
                )
            } else {
                (self.libpq.exec_params)(
                    self.pointer(),
                    sql.as_ptr(),
                    params.len() as c_int,
                    types.as_ptr(),
                    pointers.as_ptr(),
                    lengths.as_ptr(),
                    formats.as_ptr(),
                    1,
                )
            }
        };
        self.finish(result, wanted)
    }
}
