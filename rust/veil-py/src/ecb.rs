//! PyO3 glue for `veil_kernels::ecb`: raw AES-128-ECB into a reused buffer,
//! for the benchmark's physical-limit figure only.

use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::prelude::*;
use veil_kernels::ecb::aes128_ecb_encrypt;

use crate::errors::to_py;

/// Encrypts `data` (uint8, a multiple of 16 bytes) into `out` (uint8, same
/// length) with AES-128-ECB under the 16-byte `key`.
#[pyfunction]
fn aes_ecb_blocks(
    py: Python<'_>,
    key: &[u8],
    data: PyReadonlyArray1<'_, u8>,
    out: &Bound<'_, PyArray1<u8>>,
) -> PyResult<()> {
    let mut out = out.readwrite();
    let (src, dst) = (data.as_slice()?, out.as_slice_mut()?);
    py.allow_threads(|| aes128_ecb_encrypt(key, src, dst))
        .map_err(to_py)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(aes_ecb_blocks, m)?)?;
    Ok(())
}
