//! PyO3 glue for `veil_kernels::rowrnd`: ids as uint64 arrays, int64 values
//! as their uint64 bits, binary columns as (offsets, data, validity) buffers.

use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::prelude::*;
use veil_kernels::binary::{BinaryColumn, BinaryOutput};
use veil_kernels::rowrnd::RowRnd;
use veil_kernels::KernelError;

use crate::binary::{into_numpy, map_column, ColumnBuffers, OutputArrays};
use crate::errors::to_py;

/// A row-bound RND key (the expanded AES-256 key is zeroized when dropped).
#[pyclass(frozen, module = "veil._native")]
pub struct RowRndKey {
    pub(crate) inner: RowRnd,
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

/// Several columns of the same rows, each XOR its own key's keystreams, in one
/// call: `words` pairs a key with 8-byte values (uint64 bits), `binaries` a key
/// with a binary column's buffers; the outputs come back in the same orders.
///
/// For a few rows (a point query's), where a call per column costs more in
/// Python than the AES work; it holds the GIL, so large columns stay on
/// `xor_words`/`xor_column`.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn rowrnd_xor_columns<'py>(
    py: Python<'py>,
    ids: PyReadonlyArray1<'py, u64>,
    words: Vec<(PyRef<'py, RowRndKey>, PyReadonlyArray1<'py, u64>)>,
    binaries: Vec<(PyRef<'py, RowRndKey>, ColumnBuffers<'py>)>,
) -> PyResult<(Vec<Bound<'py, PyArray1<u64>>>, Vec<OutputArrays<'py>>)> {
    let ids = ids.as_slice()?;
    each_column(
        py,
        &words,
        &binaries,
        |key, values, out| key.xor_words(ids, values, out),
        |key, column| key.xor_column(ids, column),
    )
}

/// `rowrnd_xor_columns` under the ids `from`, then under the ids `to`, in one
/// call: stored values carried from their rows' old ids to new ones (a point
/// UPDATE's unassigned columns, issue 41).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn rowrnd_reseal_columns<'py>(
    py: Python<'py>,
    from: PyReadonlyArray1<'py, u64>,
    to: PyReadonlyArray1<'py, u64>,
    words: Vec<(PyRef<'py, RowRndKey>, PyReadonlyArray1<'py, u64>)>,
    binaries: Vec<(PyRef<'py, RowRndKey>, ColumnBuffers<'py>)>,
) -> PyResult<(Vec<Bound<'py, PyArray1<u64>>>, Vec<OutputArrays<'py>>)> {
    let (from, to) = (from.as_slice()?, to.as_slice()?);
    each_column(
        py,
        &words,
        &binaries,
        |key, values, out| key.rexor_words(from, to, values, out),
        |key, column| key.rexor_column(from, to, column),
    )
}

/// Each of `words` (into a new uint64 array) and of `binaries` through its key's
/// kernel call, in order: the loops the column calls above share.
#[allow(clippy::type_complexity)]
fn each_column<'py>(
    py: Python<'py>,
    words: &[(PyRef<'py, RowRndKey>, PyReadonlyArray1<'py, u64>)],
    binaries: &[(PyRef<'py, RowRndKey>, ColumnBuffers<'py>)],
    word: impl Fn(&RowRnd, &[u64], &mut [u64]) -> Result<(), KernelError>,
    binary: impl Fn(&RowRnd, &BinaryColumn<'_>) -> Result<BinaryOutput, KernelError>,
) -> PyResult<(Vec<Bound<'py, PyArray1<u64>>>, Vec<OutputArrays<'py>>)> {
    let mut word_outputs = Vec::with_capacity(words.len());
    for (key, values) in words {
        let values = values.as_slice()?;
        let mut out = vec![0u64; values.len()];
        word(&key.inner, values, &mut out).map_err(to_py)?;
        word_outputs.push(PyArray1::from_vec(py, out));
    }
    let mut binary_outputs = Vec::with_capacity(binaries.len());
    for (key, buffers) in binaries {
        let out = binary(&key.inner, &buffers.column()?).map_err(to_py)?;
        binary_outputs.push(into_numpy(py, out));
    }
    Ok((word_outputs, binary_outputs))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<RowRndKey>()?;
    m.add_function(wrap_pyfunction!(rowrnd_xor_columns, m)?)?;
    m.add_function(wrap_pyfunction!(rowrnd_reseal_columns, m)?)?;
    Ok(())
}
