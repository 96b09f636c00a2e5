//! PyO3 glue for `veil_kernels::rowrnd`: ids as uint64 arrays, int64 values
//! as their uint64 bits, binary columns as (offsets, data, validity) buffers.

use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::prelude::*;
use veil_kernels::rowrnd::RowRnd;

use crate::binary::{map_column, ColumnBuffers, OutputArrays};
use crate::errors::to_py;

/// A row-bound RND key (the expanded AES-256 key is zeroized when dropped).
#[pyclass(frozen, module = "veil._native")]
pub struct RowRndKey {
    inner: RowRnd,
}

#[pymethods]
impl RowRndKey {
    #[new]
    fn new(key: &[u8]) -> PyResult<Self> {
        Ok(Self {
            inner: RowRnd::new(key).map_err(to_py)?,
        })
    }

    /// `out = values XOR keystream(ids)` for 8-byte values (uint64 bits).
    fn xor_words(
        &self,
        py: Python<'_>,
        ids: PyReadonlyArray1<'_, u64>,
        values: PyReadonlyArray1<'_, u64>,
        out: &Bound<'_, PyArray1<u64>>,
    ) -> PyResult<()> {
        let mut out = out.readwrite();
        let (ids, values, dst) = (ids.as_slice()?, values.as_slice()?, out.as_slice_mut()?);
        py.allow_threads(|| self.inner.xor_words(ids, values, dst))
            .map_err(to_py)
    }

    /// A binary column XOR the keystreams of its rows' ids: (offsets, data).
    fn xor_column<'py>(
        &self,
        py: Python<'py>,
        ids: PyReadonlyArray1<'_, u64>,
        column: ColumnBuffers<'py>,
    ) -> PyResult<OutputArrays<'py>> {
        let ids = ids.as_slice()?;
        map_column(py, column, |column| self.inner.xor_column(ids, column))
    }

    fn __repr__(&self) -> &'static str {
        "RowRndKey(...)"
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<RowRndKey>()?;
    Ok(())
}
