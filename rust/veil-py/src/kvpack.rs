//! PyO3 glue for `veil_kernels::kvpack`: one call per stored pack.
//!
//! Decryption, inflation and parsing run with the GIL released, so the
//! scan threads of a range query open their partitions' packs on every core;
//! only building the returned `bytes` objects needs the GIL.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use veil_kernels::kvpack::blocks::{lookup, seal_blocked, BlockedPack, Level};
use veil_kernels::kvpack::{
    serialize_records, serialize_records_as, PackDictionary, PackKey, RecordList,
};

use crate::errors::to_py;

/// Envelope version, codec and dictionary version precede a blocked pack's nonce.
const BLOCKED_HEADER: usize = 6;

/// A table's zstd dictionary, prepared once (see `veil.kv.dictionary`).
#[pyclass(frozen, module = "veil._native")]
pub struct KvDictionary {
    inner: PackDictionary,
}

#[pymethods]
impl KvDictionary {
    #[new]
    fn new(dictionary: &[u8]) -> Self {
        Self {
            inner: PackDictionary::new(dictionary),
        }
    }
}

fn lists<'py>(
    py: Python<'py>,
    records: &RecordList,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
    let cut = |buffer: &[u8], spans: &[std::ops::Range<usize>]| {
        PyList::new(
            py,
            spans
                .iter()
                .map(|span| PyBytes::new(py, &buffer[span.clone()])),
        )
    };
    Ok((
        cut(&records.key_data, &records.keys)?,
        cut(&records.data, &records.values)?,
    ))
}

fn open(
    py: Python<'_>,
    key: &[u8],
    codec: u8,
    nonce: &[u8],
    sealed: &[u8],
    aad: &[u8],
    dictionary: Option<&Bound<'_, KvDictionary>>,
) -> PyResult<RecordList> {
    let prepared = dictionary.map(|d| &d.get().inner);
    py.allow_threads(|| PackKey::new(key)?.open_pack_with(codec, nonce, sealed, aad, prepared))
        .map_err(to_py)
}

/// Decrypt, decompress and parse a stored pack body; returns (keys, values).
#[pyfunction]
#[pyo3(signature = (key, codec, nonce, sealed, aad, dictionary=None))]
fn kv_open_pack<'py>(
    py: Python<'py>,
    key: &[u8],
    codec: u8,
    nonce: &[u8],
    sealed: &[u8],
    aad: &[u8],
    dictionary: Option<&Bound<'py, KvDictionary>>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
    let records = open(py, key, codec, nonce, sealed, aad, dictionary)?;
    lists(py, &records)
}

/// The value of `wanted` in a stored pack body, or None.
#[pyfunction]
#[pyo3(signature = (key, codec, nonce, sealed, aad, wanted, dictionary=None))]
#[allow(clippy::too_many_arguments)]
fn kv_pack_lookup<'py>(
    py: Python<'py>,
    key: &[u8],
    codec: u8,
    nonce: &[u8],
    sealed: &[u8],
    aad: &[u8],
    wanted: &[u8],
    dictionary: Option<&Bound<'py, KvDictionary>>,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let records = open(py, key, codec, nonce, sealed, aad, dictionary)?;
    Ok(records
        .value_of(wanted)
        .map(|value| PyBytes::new(py, value)))
}

/// A pack's record list from its keys and values, in pack order: format
/// version 3 (terminated values) when it can, else 2; `version2` forces 2.
#[pyfunction]
#[pyo3(signature = (keys, values, version2 = false))]
fn kv_serialize_pack<'py>(
    py: Python<'py>,
    keys: Vec<Bound<'py, PyBytes>>,
    values: Vec<Bound<'py, PyBytes>>,
    version2: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    if keys.len() != values.len() {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "a pack needs as many values as keys",
        ));
    }
    let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
    let values: Vec<&[u8]> = values.iter().map(|v| v.as_bytes()).collect();
    let records = if version2 {
        serialize_records_as(&keys, &values, None)
    } else {
        serialize_records(&keys, &values)
    };
    Ok(PyBytes::new(py, &records))
}

/// Seal entries (in pack order) as a blocked pack: the stored bytes after its
/// nonce. `dense`: compress hard (write-once paths: bulk loads, merges).
/// `previous`: the stored pack this one replaces (same dictionary, same
/// associated data), whose unchanged blocks keep their compressed form.
#[pyfunction]
#[pyo3(signature = (key, nonce, aad, keys, values, positions, block_rows, dictionary=None, dense=false, previous=None))]
#[allow(clippy::too_many_arguments)]
fn kv_seal_blocked<'py>(
    py: Python<'py>,
    key: &[u8],
    nonce: &[u8],
    aad: &[u8],
    keys: Vec<Bound<'py, PyBytes>>,
    values: Vec<Bound<'py, PyBytes>>,
    positions: Vec<Bound<'py, PyBytes>>,
    block_rows: usize,
    dictionary: Option<&Bound<'py, KvDictionary>>,
    dense: bool,
    previous: Option<&[u8]>,
) -> PyResult<Bound<'py, PyBytes>> {
    if keys.len() != values.len() || keys.len() != positions.len() {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "a pack needs as many values and positions as keys",
        ));
    }
    let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
    let values: Vec<&[u8]> = values.iter().map(|v| v.as_bytes()).collect();
    let positions: Vec<&[u8]> = positions.iter().map(|p| p.as_bytes()).collect();
    let prepared = dictionary.map(|d| &d.get().inner);
    let level = if dense { Level::Dense } else { Level::Fast };
    let previous = previous.map(blocked_parts).transpose()?;
    let sealed = py
        .allow_threads(|| {
            let old = previous
                .map(|(old_nonce, old_body)| BlockedPack::open(key, old_nonce, aad, old_body))
                .transpose()?;
            seal_blocked(
                key,
                nonce,
                aad,
                &keys,
                &values,
                &positions,
                block_rows,
                prepared,
                level,
                old.as_ref(),
            )
        })
        .map_err(to_py)?;
    Ok(PyBytes::new(py, &sealed))
}

/// The nonce and the sealed body of a stored blocked pack (after its 6-byte header).
fn blocked_parts(stored: &[u8]) -> PyResult<(&[u8], &[u8])> {
    if stored.len() < BLOCKED_HEADER + 12 {
        return Err(to_py(veil_kernels::KernelError::Malformed {
            row: 0,
            reason: "stored pack is truncated".into(),
        }));
    }
    let (nonce, body) = stored[BLOCKED_HEADER..].split_at(12);
    Ok((nonce, body))
}

/// Decrypt, decompress and parse the blocks of a stored blocked pack; returns
/// (keys, values). With `low` and `high` (an ordered layout's range read),
/// only the blocks that may hold keys in `low..=high` are opened: the lists
/// then hold those blocks' keys, still ascending, a superset of the range's.
#[pyfunction]
#[pyo3(signature = (key, stored, aad, dictionary=None, low=None, high=None))]
fn kv_open_blocked<'py>(
    py: Python<'py>,
    key: &[u8],
    stored: &[u8],
    aad: &[u8],
    dictionary: Option<&Bound<'py, KvDictionary>>,
    low: Option<&[u8]>,
    high: Option<&[u8]>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
    let prepared = dictionary.map(|d| &d.get().inner);
    let (nonce, body) = blocked_parts(stored)?;
    let records = py
        .allow_threads(|| {
            let pack = BlockedPack::open(key, nonce, aad, body)?;
            let numbers = match (low, high) {
                (Some(low), Some(high)) => pack.blocks_between(low, high),
                _ => 0..pack.block_count(),
            };
            pack.records_of(numbers, prepared)
        })
        .map_err(to_py)?;
    lists(py, &records)
}

/// A range read's slice of one stored blocked pack: the entries with
/// `low <= key <= high` and, given `stop` (the next pack's packID), key <
/// `stop`, in pack order. Only the blocks that may hold such keys are opened,
/// and only the entries kept become Python objects. With `int_keys` (a table
/// of integer keys) each key comes back as the integer it encodes, so a
/// range does not make a `bytes` object per key and then decode it in
/// Python (~5% of a 1,000-key range of APT stanzas).
#[pyfunction]
#[pyo3(signature = (key, stored, aad, dictionary, low, high, stop=None, int_keys=false))]
#[allow(clippy::too_many_arguments)]
fn kv_range_blocked<'py>(
    py: Python<'py>,
    key: &[u8],
    stored: &[u8],
    aad: &[u8],
    dictionary: Option<&Bound<'py, KvDictionary>>,
    low: &[u8],
    high: &[u8],
    stop: Option<&[u8]>,
    int_keys: bool,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
    let prepared = dictionary.map(|d| &d.get().inner);
    let (nonce, body) = blocked_parts(stored)?;
    let records = py
        .allow_threads(|| {
            let pack = BlockedPack::open(key, nonce, aad, body)?;
            pack.records_of(pack.blocks_between(low, high), prepared)
        })
        .map_err(to_py)?;
    let wanted = |k: &[u8]| low <= k && k <= high && stop.is_none_or(|stop| k < stop);
    let mut keys: Vec<Bound<'py, PyAny>> = Vec::with_capacity(records.keys.len());
    let mut values = Vec::with_capacity(records.keys.len());
    for (span, value) in records.keys.iter().zip(&records.values) {
        let k = &records.key_data[span.clone()];
        if !wanted(k) {
            continue;
        }
        keys.push(if int_keys {
            int_key(k)?.into_pyobject(py)?.into_any()
        } else {
            PyBytes::new(py, k).into_any()
        });
        values.push(PyBytes::new(py, &records.data[value.clone()]));
    }
    Ok((PyList::new(py, keys)?, PyList::new(py, values)?))
}

/// The integer an encoded key stands for (`veil.kv.keys`: tag 0x01, then
/// eight bytes big-endian with the sign bit flipped).
fn int_key(encoded: &[u8]) -> PyResult<i64> {
    match encoded {
        [INT_TAG, rest @ ..] if rest.len() == 8 => {
            let raw = u64::from_be_bytes(rest.try_into().expect("eight bytes"));
            Ok((raw ^ (1 << 63)) as i64)
        }
        _ => Err(to_py(veil_kernels::KernelError::Malformed {
            row: 0,
            reason: "a key of an integer-keyed table is not an integer key".into(),
        })),
    }
}

/// The first byte of an encoded integer key.
const INT_TAG: u8 = 0x01;

/// The value of `wanted` (at `position` in pack order) in a stored blocked
/// pack, or None: only the index and the one block that may hold it are
/// decrypted and inflated.
#[pyfunction]
#[pyo3(signature = (key, stored, aad, position, wanted, dictionary=None))]
fn kv_blocked_lookup<'py>(
    py: Python<'py>,
    key: &[u8],
    stored: &[u8],
    aad: &[u8],
    position: &[u8],
    wanted: &[u8],
    dictionary: Option<&Bound<'py, KvDictionary>>,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let prepared = dictionary.map(|d| &d.get().inner);
    let (nonce, body) = blocked_parts(stored)?;
    let value = py
        .allow_threads(|| lookup(key, nonce, aad, body, position, wanted, prepared))
        .map_err(to_py)?;
    Ok(value.map(|value| PyBytes::new(py, &value)))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<KvDictionary>()?;
    m.add_function(wrap_pyfunction!(kv_serialize_pack, m)?)?;
    m.add_function(wrap_pyfunction!(kv_open_pack, m)?)?;
    m.add_function(wrap_pyfunction!(kv_pack_lookup, m)?)?;
    m.add_function(wrap_pyfunction!(kv_seal_blocked, m)?)?;
    m.add_function(wrap_pyfunction!(kv_open_blocked, m)?)?;
    m.add_function(wrap_pyfunction!(kv_range_blocked, m)?)?;
    m.add_function(wrap_pyfunction!(kv_blocked_lookup, m)?)?;
    Ok(())
}
