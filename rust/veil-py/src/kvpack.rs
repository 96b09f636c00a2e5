//! PyO3 glue for `veil_kernels::kvpack`: one call per stored pack.
//!
//! Decryption, inflation and parsing run with the GIL released, so the
//! scan threads of a range query open their partitions' packs on every core;
//! only building the returned `bytes` objects needs the GIL.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use veil_kernels::kvpack::{PackKey, RecordList};

use crate::errors::to_py;

fn open(
    py: Python<'_>,
    key: &[u8],
    codec: u8,
    nonce: &[u8],
    sealed: &[u8],
    aad: &[u8],
) -> PyResult<RecordList> {
    py.allow_threads(|| PackKey::new(key)?.open_pack(codec, nonce, sealed, aad))
        .map_err(to_py)
}

/// Decrypt, decompress and parse a stored pack body; returns (keys, values).
#[pyfunction]
fn kv_open_pack<'py>(
    py: Python<'py>,
    key: &[u8],
    codec: u8,
    nonce: &[u8],
    sealed: &[u8],
    aad: &[u8],
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
    let records = open(py, key, codec, nonce, sealed, aad)?;
    let cut = |spans: &[std::ops::Range<usize>]| {
        PyList::new(
            py,
            spans
                .iter()
                .map(|span| PyBytes::new(py, &records.data[span.clone()])),
        )
    };
    Ok((cut(&records.keys)?, cut(&records.values)?))
}

/// The value of `wanted` in a stored pack body, or None.
#[pyfunction]
fn kv_pack_lookup<'py>(
    py: Python<'py>,
    key: &[u8],
    codec: u8,
    nonce: &[u8],
    sealed: &[u8],
    aad: &[u8],
    wanted: &[u8],
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let records = open(py, key, codec, nonce, sealed, aad)?;
    Ok(records
        .value_of(wanted)
        .map(|value| PyBytes::new(py, value)))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(kv_open_pack, m)?)?;
    m.add_function(wrap_pyfunction!(kv_pack_lookup, m)?)?;
    Ok(())
}
