//! PyO3 glue for `veil_kernels::ff1` (placeholder until the scheme lands).

use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
