//! PyO3 glue for `veil_kernels::kvpack`: one call per stored pack.
//!
//! Decryption, inflation and parsing run with the GIL released, so the
//! scan threads of a range query open their partitions' packs on every core;
//! only building the returned `bytes` objects needs the GIL.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use veil_kernels::kvpack::{serialize_records, PackDictionary, PackKey, RecordList};

use crate::errors::to_py;

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

/// A pack's record list (format version 2) from its keys and values, in pack order.
#[pyfunction]
fn kv_serialize_pack<'py>(
    py: Python<'py>,
    keys: Vec<Bound<'py, PyBytes>>,
    values: Vec<Bound<'py, PyBytes>>,
) -> PyResult<Bound<'py, PyBytes>> {
    if keys.len() != values.len() {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "a pack needs as many values as keys",
        ));
    }
    let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
    let values: Vec<&[u8]> = values.iter().map(|v| v.as_bytes()).collect();
    Ok(PyBytes::new(py, &serialize_records(&keys, &values)))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<KvDictionary>()?;
    m.add_function(wrap_pyfunction!(kv_serialize_pack, m)?)?;
    m.add_function(wrap_pyfunction!(kv_open_pack, m)?)?;
    m.add_function(wrap_pyfunction!(kv_pack_lookup, m)?)?;
    Ok(())
}
