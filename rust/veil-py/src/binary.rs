//! Arrow binary columns between numpy buffers and `veil_kernels::binary`.
//!
//! Python hands over the offsets (as int64), the data buffer and an optional
//! validity bitmap as numpy views of the Arrow buffers, without copying; the
//! kernels' output vectors become numpy arrays without copying either.

use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use veil_kernels::binary::{BinaryColumn, BinaryOutput};
use veil_kernels::KernelError;

use crate::errors::to_py;

/// The three buffers of a binary column, as Python passes them: a tuple
/// `(offsets int64, data uint8, validity uint8 bitmap or None)`.
#[derive(FromPyObject)]
pub struct ColumnBuffers<'py>(
    PyReadonlyArray1<'py, i64>,
    PyReadonlyArray1<'py, u8>,
    Option<PyReadonlyArray1<'py, u8>>,
);

impl ColumnBuffers<'_> {
    /// A checked kernel view borrowing the numpy buffers.
    pub fn column(&self) -> PyResult<BinaryColumn<'_>> {
        let validity = match &self.2 {
            Some(bits) => Some(bits.as_slice()?),
            None => None,
        };
        BinaryColumn::new(self.0.as_slice()?, self.1.as_slice()?, validity).map_err(to_py)
    }
}

/// The output offsets (int32) and data as numpy arrays that own the buffers.
pub type OutputArrays<'py> = (Bound<'py, PyArray1<i32>>, Bound<'py, PyArray1<u8>>);

pub fn into_numpy(py: Python<'_>, out: BinaryOutput) -> OutputArrays<'_> {
    (
        PyArray1::from_vec(py, out.offsets),
        PyArray1::from_vec(py, out.data),
    )
}

/// Run a column kernel without the GIL and hand its output to numpy.
pub fn map_column<'py, F>(
    py: Python<'py>,
    buffers: ColumnBuffers<'_>,
    kernel: F,
) -> PyResult<OutputArrays<'py>>
where
    F: FnOnce(&BinaryColumn<'_>) -> Result<BinaryOutput, KernelError> + Send,
{
    let column = buffers.column()?;
    let out = py.allow_threads(|| kernel(&column)).map_err(to_py)?;
    Ok(into_numpy(py, out))
}
