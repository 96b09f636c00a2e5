//! PyO3 glue for `veil_kernels::bsoncols`: a fetched grouped sum's columns, read
//! from the server's raw BSON batches (see `veil.documents.fetchsums`).

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use veil_kernels::bsoncols::fetched_columns as read_columns;

/// Each document's group number, each group's token, and each field's tuple of columns.
type Read<'py> = (
    Bound<'py, PyArray1<i64>>,
    Vec<Bound<'py, PyBytes>>,
    Vec<Bound<'py, PyTuple>>,
);

/// `None`, or `(codes, tokens, fields)`: each document's group number (int64), each
/// group's token (bytes, in the order first met) and per name `(low, high, valued,
/// first, has_first, inc_docs, inc_ids)` numpy columns.
#[pyfunction]
#[pyo3(signature = (batches, key, names))]
fn fetched_columns<'py>(
    py: Python<'py>,
    batches: Vec<Bound<'py, PyBytes>>,
    key: Option<&[u8]>,
    names: Vec<Vec<u8>>,
) -> PyResult<Option<Read<'py>>> {
    let slices: Vec<&[u8]> = batches.iter().map(|b| b.as_bytes()).collect();
    let names: Vec<&[u8]> = names.iter().map(Vec::as_slice).collect();
    let Some(read) = read_columns(&slices, key, &names) else {
        return Ok(None);
    };
    let codes = PyArray1::from_vec(py, read.codes);
    let tokens = read.keys.iter().map(|t| PyBytes::new(py, t)).collect();
    let fields = read
        .fields
        .into_iter()
        .map(|c| {
            PyTuple::new(
                py,
                [
                    PyArray1::from_vec(py, c.low).into_any(),
                    PyArray1::from_vec(py, c.high).into_any(),
                    PyArray1::from_vec(py, c.valued).into_any(),
                    PyArray1::from_vec(py, c.first).into_any(),
                    PyArray1::from_vec(py, c.has_first).into_any(),
                    PyArray1::from_vec(py, c.inc_docs).into_any(),
                    PyArray1::from_vec(py, c.inc_ids).into_any(),
                ],
            )
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok(Some((codes, tokens, fields)))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(fetched_columns, m)?)?;
    Ok(())
}
