//! PyO3 glue for `veil_kernels::paillier`: the server's ciphertext products.
//!
//! Each function takes n^2 as big-endian bytes and binary columns as
//! `(offsets int64, data uint8, validity or None)`, and returns the results
//! as fixed-width rows packed in one uint8 array (NULLs omitted).

use numpy::PyArray1;
use pyo3::prelude::*;
use veil_kernels::paillier::CiphertextGroup;

use crate::binary::ColumnBuffers;
use crate::errors::to_py;

type Rows<'py> = Bound<'py, PyArray1<u8>>;

/// `a[i] * b[i] mod n^2` for each row where both are present.
#[pyfunction]
fn paillier_multiply_rows<'py>(
    py: Python<'py>,
    n_square: &[u8],
    a: ColumnBuffers<'py>,
    b: ColumnBuffers<'py>,
) -> PyResult<Rows<'py>> {
    let group = CiphertextGroup::new(n_square).map_err(to_py)?;
    let (a, b) = (a.column()?, b.column()?);
    let out = py
        .allow_threads(|| group.multiply_rows(&a, &b))
        .map_err(to_py)?;
    Ok(PyArray1::from_vec(py, out))
}

/// The product of a column's present ciphertexts: one stored ciphertext.
#[pyfunction]
fn paillier_product<'py>(
    py: Python<'py>,
    n_square: &[u8],
    column: ColumnBuffers<'py>,
) -> PyResult<Rows<'py>> {
    let group = CiphertextGroup::new(n_square).map_err(to_py)?;
    let column = column.column()?;
    let out = py.allow_threads(|| group.product(&column)).map_err(to_py)?;
    Ok(PyArray1::from_vec(py, out))
}

/// One product per group; group `g` is members
/// `group_offsets[g]..group_offsets[g + 1]`.
#[pyfunction]
fn paillier_group_products<'py>(
    py: Python<'py>,
    n_square: &[u8],
    members: ColumnBuffers<'py>,
    group_offsets: numpy::PyReadonlyArray1<'py, i64>,
) -> PyResult<Rows<'py>> {
    let group = CiphertextGroup::new(n_square).map_err(to_py)?;
    let members = members.column()?;
    let offsets = group_offsets.as_slice()?;
    let out = py
        .allow_threads(|| group.group_products(&members, offsets))
        .map_err(to_py)?;
    Ok(PyArray1::from_vec(py, out))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(paillier_multiply_rows, m)?)?;
    m.add_function(wrap_pyfunction!(paillier_product, m)?)?;
    m.add_function(wrap_pyfunction!(paillier_group_products, m)?)?;
    Ok(())
}
