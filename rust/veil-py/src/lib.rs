//! `veil._native`: thin PyO3 glue over `veil-kernels`.
//!
//! This crate converts types and maps errors; the schemes' algorithms are in
//! `veil-kernels`. Each scheme's glue lives in its own module and registers its
//! functions; `point` runs the wire server's native point statements (issue 41).

use pyo3::prelude::*;

mod ashe;
mod binary;
mod bsoncols;
mod ecb;
mod errors;
mod ff1;
mod gil;
mod joinadj;
mod kvpack;
mod ope;
mod ore;
mod paillier;
mod point;
mod rnd;
mod rowrnd;
mod search;
mod serve;
mod siv;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    ashe::register(m)?;
    bsoncols::register(m)?;
    ecb::register(m)?;
    ff1::register(m)?;
    joinadj::register(m)?;
    kvpack::register(m)?;
    ope::register(m)?;
    ore::register(m)?;
    paillier::register(m)?;
    point::register(m)?;
    rnd::register(m)?;
    rowrnd::register(m)?;
    search::register(m)?;
    serve::register(m)?;
    siv::register(m)?;
    Ok(())
}
