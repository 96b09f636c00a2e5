//! `veil._native`: thin PyO3 glue over `veil-kernels`.
//!
//! This crate converts types and maps errors; it holds no algorithm code.

use pyo3::prelude::*;

mod errors;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    Ok(())
}
