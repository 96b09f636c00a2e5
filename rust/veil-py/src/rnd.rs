//! PyO3 glue for `veil_kernels::rnd`.

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use veil_kernels::rnd::Rnd;

use crate::binary::{map_column, ColumnBuffers, OutputArrays};
use crate::errors::to_py;

/// Encrypt (or, with `decrypt=True`, decrypt) a binary column; returns the
/// output's (offsets int32, data uint8).
#[pyfunction]
#[pyo3(signature = (key, context, column, *, decrypt=false))]
fn rnd_column<'py>(
    py: Python<'py>,
    key: &[u8],
    context: &[u8],
    column: ColumnBuffers<'py>,
    decrypt: bool,
) -> PyResult<OutputArrays<'py>> {
    let rnd = Rnd::new(key).map_err(to_py)?;
    map_column(py, column, |column| match decrypt {
        false => rnd.encrypt_column(column, context),
        true => rnd.decrypt_column(column, context),
    })
}

/// HAZMAT, known-answer tests only: AES-256-GCM under a chosen nonce,
/// returning `ciphertext || tag`. Never use a chosen nonce to store data.
#[pyfunction]
fn rnd_encrypt_with_nonce_for_tests<'py>(
    py: Python<'py>,
    key: &[u8],
    nonce: &[u8],
    aad: &[u8],
    plaintext: &[u8],
) -> PyResult<Bound<'py, PyBytes>> {
    let rnd = Rnd::new(key).map_err(to_py)?;
    let sealed = rnd
        .encrypt_with_nonce_for_tests(nonce, aad, plaintext)
        .map_err(to_py)?;
    Ok(PyBytes::new(py, &sealed))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(rnd_column, m)?)?;
    m.add_function(wrap_pyfunction!(rnd_encrypt_with_nonce_for_tests, m)?)?;
    Ok(())
}
