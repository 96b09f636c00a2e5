//! PyO3 glue for `veil_kernels::joinadj`: binary columns as (offsets, data,
//! validity) buffers, int64 columns as an int64 array and a validity bitmap.

use numpy::PyReadonlyArray1;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use veil_kernels::joinadj::{JoinAdjKey as Key, Token};

use crate::binary::{into_numpy, map_column, ColumnBuffers, OutputArrays};
use crate::errors::to_py;

/// A JOIN-ADJ key (its secret scalar is zeroized when dropped).
#[pyclass(frozen, module = "veil._native")]
pub struct JoinAdjKey {
    inner: Key,
}

#[pymethods]
impl JoinAdjKey {
    #[new]
    fn new(key: &[u8]) -> PyResult<Self> {
        Ok(Self {
            inner: Key::new(key).map_err(to_py)?,
        })
    }

    /// The 33-byte ciphertext of one value.
    fn encrypt_one<'py>(&self, py: Python<'py>, value: &[u8]) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.encrypt(value))
    }

    /// Ciphertexts of a binary column: (offsets int32, data uint8).
    fn encrypt_column<'py>(
        &self,
        py: Python<'py>,
        column: ColumnBuffers<'py>,
    ) -> PyResult<OutputArrays<'py>> {
        map_column(py, column, |column| self.inner.encrypt_column(column))
    }

    /// Ciphertexts of int64 values (rows whose validity bit is 0 stay empty).
    fn encrypt_words<'py>(
        &self,
        py: Python<'py>,
        values: PyReadonlyArray1<'py, i64>,
        validity: Option<PyReadonlyArray1<'py, u8>>,
    ) -> PyResult<OutputArrays<'py>> {
        let values = values.as_slice()?;
        let validity = match &validity {
            Some(bits) => Some(bits.as_slice()?),
            None => None,
        };
        let out = py
            .allow_threads(|| self.inner.encrypt_words(values, validity))
            .map_err(to_py)?;
        Ok(into_numpy(py, out))
    }

    /// The token that re-keys this key's ciphertexts onto `target`'s.
    fn token_to<'py>(&self, py: Python<'py>, target: &JoinAdjKey) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.token_to(&target.inner))
    }

    fn __repr__(&self) -> &'static str {
        "JoinAdjKey(...)"
    }
}

/// Re-key a column of ciphertexts with a token: (offsets int32, data uint8).
#[pyfunction]
fn joinadj_rekey<'py>(
    py: Python<'py>,
    token: &[u8],
    column: ColumnBuffers<'py>,
) -> PyResult<OutputArrays<'py>> {
    let token = Token::new(token).map_err(to_py)?;
    map_column(py, column, |column| token.rekey_column(column))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<JoinAdjKey>()?;
    m.add_function(wrap_pyfunction!(joinadj_rekey, m)?)?;
    Ok(())
}
