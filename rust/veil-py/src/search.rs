//! PyO3 glue for `veil_kernels::search`.

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use veil_kernels::search::{match_column, tokenize, SearchKey};

use crate::binary::{map_column, ColumnBuffers, OutputArrays};
use crate::errors::to_py;

/// Encrypt the words of a UTF-8 column; returns (offsets int32, data uint8).
#[pyfunction]
fn search_encrypt<'py>(
    py: Python<'py>,
    key: &[u8],
    column: ColumnBuffers<'py>,
) -> PyResult<OutputArrays<'py>> {
    let search = SearchKey::new(key).map_err(to_py)?;
    map_column(py, column, |column| search.encrypt_column(column))
}

/// The token for one word.
#[pyfunction]
fn search_token<'py>(py: Python<'py>, key: &[u8], word: &str) -> PyResult<Bound<'py, PyBytes>> {
    let token = SearchKey::new(key)
        .and_then(|search| search.token(word))
        .map_err(to_py)?;
    Ok(PyBytes::new(py, &token))
}

/// Which rows hold the token's word, as an Arrow bitmap (uint8, LSB first).
#[pyfunction]
fn search_match<'py>(
    py: Python<'py>,
    token: &[u8],
    column: ColumnBuffers<'py>,
) -> PyResult<Bound<'py, PyArray1<u8>>> {
    let column = column.column()?;
    let bits = py
        .allow_threads(|| match_column(&column, token))
        .map_err(to_py)?;
    Ok(PyArray1::from_vec(py, bits))
}

/// The words of `text` under SEARCH's tokenisation rule.
#[pyfunction]
fn search_tokenize(text: &str) -> Vec<String> {
    tokenize(text)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(search_encrypt, m)?)?;
    m.add_function(wrap_pyfunction!(search_token, m)?)?;
    m.add_function(wrap_pyfunction!(search_match, m)?)?;
    m.add_function(wrap_pyfunction!(search_tokenize, m)?)?;
    Ok(())
}
