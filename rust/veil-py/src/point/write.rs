//! A point UPDATE answered without Python: `UPDATE t SET c = c + $1 WHERE k = $2`
//! (pgbench's) as `veil.session.point_writes` runs it, inside a transaction.
//!
//! The session first takes the table's write lock, checks its design and hands
//! out the row's fresh id (`begin`, the one call into Python). Then, as the
//! session does: the row is matched by its DET key; the assigned value is
//! computed from the decrypted old one as DuckDB would (a value past its type's
//! range goes back to the session, which raises its error); it is encrypted
//! under the fresh id and the row's other row-bound columns are moved from the
//! old id's keystreams to the new one's without being decrypted; one UPDATE
//! writes the row in place under its new id. A row another client rewrote
//! meanwhile (the UPDATE changes nothing) is matched and written again, under
//! another fresh id; after a few such collisions it goes back to the session.

use pyo3::prelude::*;
use veil_kernels::binary::BinaryColumn;
use veil_wire::engine::Outcome;

use super::values::{self, Opener, Plain, Stored};
use super::{libpq, Frame, Miss, Statement, WireValue};
use crate::rowrnd::RowRndKey;
use std::ffi::CString;

/// An assigned integer: `source ± parameter`, or the parameter alone.
pub struct Assigned {
    /// The fetched column of the value added to, and how it opens.
    pub source: Option<(usize, Opener)>,
    pub param: usize,
    pub sign: i64,
    pub source_bits: u32,
    pub column_bits: u32,
}

/// What one parameter of the UPDATE holds.
pub enum UpdateParam {
    NewId,
    OldId,
    /// A stored row-bound integer moved to the new id (`bits`: its width; 0: 64).
    ResealWord {
        column: usize,
        key: Py<RowRndKey>,
        bits: u32,
    },
    /// A stored row-bound string moved to the new id.
    ResealBytes {
        column: usize,
        key: Py<RowRndKey>,
    },
    /// An assigned text column's new value (the wire parameter `param`), encrypted
    /// under the new id.
    AssignedText {
        param: usize,
        key: Py<RowRndKey>,
    },
    /// An assigned column's new value, encrypted under the new id in `bits` bits.
    Assigned {
        value: Assigned,
        key: Py<RowRndKey>,
        bits: u32,
    },
}

pub struct WritePlan {
    pub frame: Frame,
    pub matched: Statement,
    pub row_id: usize,
    pub update: CString,
    pub update_types: Vec<u32>,
    pub update_params: Vec<UpdateParam>,
    /// The session's `native_write_begin` for the table: the fresh row id, or None.
    pub begin: Py<PyAny>,
    /// The session's `native_write_end`: outside a transaction, the statement's end
    /// (its table lock is let go, as after the session's own statements).
    pub end: Py<PyAny>,
}

/// Matches and writes of one point UPDATE before the session takes it over.
const ATTEMPTS: usize = 8;

fn fits(value: i64, bits: u32) -> bool {
    bits >= 64 || (-(1i64 << (bits - 1))..(1i64 << (bits - 1))).contains(&value)
}

fn mask(word: u64, bits: u32) -> u64 {
    if bits == 0 || bits >= 64 {
        word
    } else {
        word & ((1u64 << bits) - 1)
    }
}

fn int8(value: i64) -> Option<Vec<u8>> {
    Some(value.to_be_bytes().to_vec())
}

impl Assigned {
    /// The new value, as DuckDB computes it; None where the session must (an overflow,
    /// a NULL operand).
    fn value(&self, wire: &[WireValue<'_>], row: &Row<'_>) -> Option<i64> {
        let given = wire[self.param].int()?;
        if given.unsigned_abs() == 1 << 31 {
            return None; // DuckDB may type 2^31 negated either way
        }
        let Some((column, opener)) = &self.source else {
            return fits(given, self.column_bits).then_some(given);
        };
        let Plain::Int(old) = opener.open(&row.stored(*column)??, Some(row.old_id))? else {
            return None;
        };
        let given_bits = if fits(given, 32) { 32 } else { 64 };
        let limit = self.source_bits.max(given_bits).min(self.column_bits);
        let new = old.checked_add(self.sign.checked_mul(given)?)?;
        fits(new, limit).then_some(new)
    }
}

/// The matched row as the server returned it.
struct Row<'a> {
    answer: &'a libpq::Answer<'static>,
    types: Vec<u32>,
    old_id: u64,
}

impl Row<'_> {
    /// Column `at`'s stored value: None if the type is not read here, Some(None) if NULL.
    fn stored(&self, at: usize) -> Option<Option<Stored<'_>>> {
        match self.answer.value(0, at) {
            None => Some(None),
            Some(raw) => values::stored(*self.types.get(at)?, raw).map(Some),
        }
    }
}

/// A write's `run` on the frame's connection, in or out of a transaction (out of one,
/// the session's `end` afterwards); the session's own path if the frame moved.
fn statement(
    frame: &Frame,
    end: &Py<PyAny>,
    run: impl FnOnce(&libpq::Connection) -> Result<Outcome, Miss>,
) -> Result<Outcome, Miss> {
    let connection = &frame.connection;
    let status = connection.transaction_status();
    let alone = status == libpq::TRANS_IDLE;
    if !frame.current() || !connection.usable() || !(alone || status == libpq::TRANS_INTRANS) {
        return Err(Miss::Fallback);
    }
    let done = run(connection);
    if alone {
        crate::gil::with_python(|py| {
            let _ = end.call0(py);
        });
    }
    done
}

/// The session's `begin()`: the table's lock taken and the row's fresh id; the session's
/// own path if it says None.
fn fresh_id(begin: &Py<PyAny>) -> Result<u64, Miss> {
    crate::gil::with_python(|py| {
        begin
            .call0(py)
            .and_then(|id| id.extract::<Option<u64>>(py))
            .ok()
            .flatten()
    })
    .ok_or(Miss::Fallback)
}

impl WritePlan {
    pub fn run(&self, params: &[Option<&str>]) -> Result<Outcome, Miss> {
        let (wire, bound) = self.matched.bound(params).ok_or(Miss::Fallback)?;
        statement(&self.frame, &self.end, |connection| {
            self.written(&wire, &bound, connection)
        })
    }

    /// The statement, matched again while another client's write beat it to the row.
    ///
    /// Under contention (pgbench's ten branch rows at 8 clients) the UPDATE by row id
    /// mostly waits for another transaction's row lock and then finds the row under a
    /// new id: as PostgreSQL's READ COMMITTED UPDATE does, the row is read again (a new
    /// statement sees what committed) and written once more, each attempt under a fresh
    /// id (an id whose ciphertexts the server saw in a failed UPDATE is never used
    /// again). Sent back to the session, each of these cost ~1.5 ms of Python.
    fn written(
        &self,
        wire: &[WireValue<'_>],
        bound: &super::Params,
        connection: &libpq::Connection,
    ) -> Result<Outcome, Miss> {
        for _ in 0..ATTEMPTS {
            if let Some(outcome) = self.attempt(wire, bound, connection)? {
                return Ok(outcome);
            }
        }
        Err(Miss::Fallback)
    }

    /// One match and write, once `begin` said it may (in autocommit, the match and the
    /// UPDATE each commit alone, as the session's own point UPDATE does); None: a row
    /// rewritten between them was left unchanged.
    fn attempt(
        &self,
        wire: &[WireValue<'_>],
        bound: &super::Params,
        connection: &libpq::Connection,
    ) -> Result<Option<Outcome>, Miss> {
        let new_id = fresh_id(&self.begin)?;
        let answer = connection
            .query(&self.matched.sql, &self.matched.types, bound)
            .map_err(Miss::Server)?;
        match answer.rows() {
            0 => return Ok(Some(updated(0))),
            1 => {}
            _ => return Err(Miss::Fallback),
        }
        let types: Vec<u32> = (0..answer.columns())
            .map(|c| answer.binary_type(c))
            .collect::<Option<_>>()
            .ok_or(Miss::Fallback)?;
        let old_id = match answer
            .value(0, self.row_id)
            .and_then(|raw| values::stored(*types.get(self.row_id)?, raw))
        {
            Some(Stored::Int(id)) => id as u64,
            _ => return Err(Miss::Fallback),
        };
        let row = Row {
            answer: &answer,
            types,
            old_id,
        };
        let sent = self
            .update_params
            .iter()
            .map(|param| self.param(param, wire, &row, new_id))
            .collect::<Option<Vec<_>>>()
            .ok_or(Miss::Fallback)?;
        let changed = connection
            .change(&self.update, &self.update_types, &sent)
            .map_err(Miss::Server)?
            .changed();
        match changed {
            Some(1) => Ok(Some(updated(1))),
            Some(0) => Ok(None), // rewritten by another client: nothing written
            _ => Err(Miss::Server(libpq::ServerError {
                code: "XX000".into(),
                message: "Veil's point UPDATE changed other than one row".into(),
            })),
        }
    }

    /// One parameter of the UPDATE (its outer None: the session must write the row).
    fn param(
        &self,
        param: &UpdateParam,
        wire: &[WireValue<'_>],
        row: &Row<'_>,
        new_id: u64,
    ) -> Option<Option<Vec<u8>>> {
        let (old, new) = (row.old_id, new_id);
        Some(match param {
            UpdateParam::NewId => int8(new as i64),
            UpdateParam::OldId => int8(old as i64),
            UpdateParam::ResealWord { column, key, bits } => match row.stored(*column)? {
                None => None,
                Some(Stored::Int(stored)) => {
                    let mut out = [0u64];
                    key.get()
                        .inner
                        .rexor_words(&[old], &[new], &[stored as u64], &mut out)
                        .ok()?;
                    int8(mask(out[0], *bits) as i64)
                }
                Some(Stored::Bytes(_)) => return None,
            },
            UpdateParam::ResealBytes { column, key } => match row.stored(*column)? {
                None => None,
                Some(Stored::Bytes(data)) => {
                    let offsets = [0i64, data.len() as i64];
                    let column = BinaryColumn::new(&offsets, data, None).ok()?;
                    let moved = key.get().inner.rexor_column(&[old], &[new], &column).ok()?;
                    Some(moved.data)
                }
                Some(Stored::Int(_)) => return None,
            },
            UpdateParam::AssignedText { param, key } => match &wire[*param] {
                WireValue::Text(text) => return sealed_bytes(key, new, text.as_bytes()),
                WireValue::Int(_) => return None,
            },
            UpdateParam::Assigned { value, key, bits } => {
                return sealed_word(key, new, value.value(wire, row)?, *bits)
            }
        })
    }
}

fn updated(rows: usize) -> Outcome {
    Outcome::Command {
        tag: "UPDATE".into(),
        rows: Some(rows),
        status: Vec::new(),
    }
}

/// What one value of a native INSERT's row holds.
pub enum InsertValue {
    NewId,
    /// The wire integer `param` (negated: `-$n`, as pgbench `-M simple` writes it) into an
    /// integer column of `column_bits`, encrypted under the new id in `bits` (0: 64).
    Int {
        param: usize,
        negated: bool,
        column_bits: u32,
        key: Py<RowRndKey>,
        bits: u32,
    },
    /// The wire text `param` into a text column (no NUL, which no SQL text holds).
    Text {
        param: usize,
        key: Py<RowRndKey>,
    },
    /// A constant's encoding (None: NULL), encrypted under the new id.
    Fixed {
        value: Option<Plain>,
        key: Py<RowRndKey>,
        bits: u32,
    },
    /// `CURRENT_TIMESTAMP`: microseconds since the epoch, now (UTC).
    Clock {
        key: Py<RowRndKey>,
        bits: u32,
    },
}

/// A one-row `INSERT ... VALUES` (pgbench's history row), as
/// `veil.session.point_inserts` writes it: the row's fresh id from the session, each
/// value encoded and encrypted under it, one INSERT.
pub struct InsertPlan {
    pub frame: Frame,
    /// The INSERT (its statement's wire parameters read by `bound`).
    pub statement: Statement,
    pub values: Vec<InsertValue>,
    pub begin: Py<PyAny>,
    pub end: Py<PyAny>,
}

fn sealed_word(key: &Py<RowRndKey>, id: u64, value: i64, bits: u32) -> Option<Option<Vec<u8>>> {
    if !fits(value, if bits == 0 { 64 } else { bits }) {
        return None;
    }
    let mut out = [0u64];
    key.get()
        .inner
        .xor_words(&[id], &[value as u64], &mut out)
        .ok()?;
    Some(int8(mask(out[0], bits) as i64))
}

fn sealed_bytes(key: &Py<RowRndKey>, id: u64, value: &[u8]) -> Option<Option<Vec<u8>>> {
    let offsets = [0i64, value.len() as i64];
    let column = BinaryColumn::new(&offsets, value, None).ok()?;
    Some(Some(key.get().inner.xor_column(&[id], &column).ok()?.data))
}

impl InsertValue {
    fn sent(&self, wire: &[WireValue<'_>], id: u64) -> Option<Option<Vec<u8>>> {
        match self {
            InsertValue::NewId => Some(int8(id as i64)),
            InsertValue::Int {
                param,
                negated,
                column_bits,
                key,
                bits,
            } => {
                let given = wire[*param].int()?;
                let value = if *negated {
                    given.checked_neg()?
                } else {
                    given
                };
                if !fits(value, *column_bits) {
                    return None;
                }
                sealed_word(key, id, value, *bits)
            }
            InsertValue::Text { param, key } => match &wire[*param] {
                WireValue::Text(text) if !text.contains('\0') => {
                    sealed_bytes(key, id, text.as_bytes())
                }
                _ => None,
            },
            InsertValue::Fixed { value, key, bits } => match value {
                None => Some(None),
                Some(Plain::Int(v)) => sealed_word(key, id, *v, *bits),
                Some(Plain::Bytes(b)) => sealed_bytes(key, id, b),
            },
            InsertValue::Clock { key, bits } => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .ok()?;
                sealed_word(key, id, i64::try_from(now.as_micros()).ok()?, *bits)
            }
        }
    }
}

impl InsertPlan {
    pub fn run(&self, params: &[Option<&str>]) -> Result<Outcome, Miss> {
        let (wire, _) = self.statement.bound(params).ok_or(Miss::Fallback)?;
        statement(&self.frame, &self.end, |connection| {
            self.inserted(&wire, connection)
        })
    }

    fn inserted(
        &self,
        wire: &[WireValue<'_>],
        connection: &libpq::Connection,
    ) -> Result<Outcome, Miss> {
        // the values first: one the plan does not take goes to the session before any id
        let probe = self
            .values
            .iter()
            .map(|v| v.sent(wire, 0))
            .collect::<Option<Vec<_>>>();
        probe.ok_or(Miss::Fallback)?;
        let id = fresh_id(&self.begin)?;
        let sent = self
            .values
            .iter()
            .map(|v| v.sent(wire, id))
            .collect::<Option<Vec<_>>>()
            .ok_or(Miss::Fallback)?;
        let changed = connection
            .change(&self.statement.sql, &self.statement.types, &sent)
            .map_err(Miss::Server)?
            .changed();
        match changed {
            Some(1) => Ok(Outcome::Command {
                tag: "INSERT".into(),
                rows: Some(1),
                status: Vec::new(),
            }),
            _ => Err(Miss::Server(libpq::ServerError {
                code: "XX000".into(),
                message: "Veil's one-row INSERT wrote other than one row".into(),
            })),
        }
    }
}
