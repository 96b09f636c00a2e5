//! PyO3 glue for `veil_kernels::ashe`: ids as uint64 arrays (Python views
//! int64 row ids as their uint64 bits), values and plaintexts as int64, and
//! ciphertexts written into a caller-provided uint64 array (a view of the
//! int64 column the server stores).

use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;
use veil_kernels::ashe::Ashe;
use veil_kernels::KernelError;

use crate::errors::to_py;

/// Below this many elements a call keeps the GIL: releasing and taking it
/// back costs more than the work.
const RELEASE_GIL_FROM: usize = 4096;

/// Runs `work` without the GIL when the batch is large enough to be worth it.
fn run<T: Send>(py: Python<'_>, elements: usize, work: impl FnOnce() -> T + Send) -> T {
    if elements >= RELEASE_GIL_FROM {
        py.allow_threads(work)
    } else {
        work()
    }
}

/// An ASHE key (the expanded AES-256 key is zeroized when dropped).
#[pyclass(frozen, module = "veil._native")]
pub struct AsheKey {
    inner: Ashe,
}

#[pymethods]
impl AsheKey {
    #[new]
    fn new(key: &[u8]) -> PyResult<Self> {
        Ok(Self {
            inner: Ashe::new(key).map_err(to_py)?,
        })
    }

    /// The PRF `F(id)`.
    fn prf(&self, id: u64) -> u64 {
        self.inner.prf(id)
    }

    /// The pad `F(id) − F(id − 1)` of one id.
    fn pad(&self, id: u64) -> u64 {
        self.inner.pad(id)
    }

    /// Encrypts `values` (int64) under `ids` (uint64) into `out` (uint64).
    fn encrypt(
        &self,
        py: Python<'_>,
        ids: PyReadonlyArray1<'_, u64>,
        values: PyReadonlyArray1<'_, i64>,
        out: &Bound<'_, PyArray1<u64>>,
    ) -> PyResult<()> {
        let mut out = out.readwrite();
        let (ids, values, dst) = (ids.as_slice()?, values.as_slice()?, out.as_slice_mut()?);
        run(py, ids.len(), || self.inner.encrypt_into(ids, values, dst)).map_err(to_py)
    }

    /// Decrypts single ciphertexts (uint64 bits) under `ids` into `out` (int64).
    fn decrypt(
        &self,
        py: Python<'_>,
        ids: PyReadonlyArray1<'_, u64>,
        ciphertexts: PyReadonlyArray1<'_, u64>,
        out: &Bound<'_, PyArray1<i64>>,
    ) -> PyResult<()> {
        let mut out = out.readwrite();
        let (ids, src, dst) = (
            ids.as_slice()?,
            ciphertexts.as_slice()?,
            out.as_slice_mut()?,
        );
        run(py, ids.len(), || self.inner.decrypt_into(ids, src, dst)).map_err(to_py)
    }

    /// The pad sum of a multiset of ids (any order).
    fn pad_sum_ids(&self, py: Python<'_>, ids: PyReadonlyArray1<'_, u64>) -> PyResult<u64> {
        let ids = ids.as_slice()?;
        Ok(run(py, ids.len(), || self.inner.pad_sum_ids(ids)))
    }

    /// The pad sum over runs: a C-contiguous (n, 2) uint64 array of
    /// `[start, end]` pairs, both ends included.
    fn pad_sum_runs(&self, py: Python<'_>, runs: PyReadonlyArray2<'_, u64>) -> PyResult<u64> {
        if runs.shape()[1] != 2 {
            let shape = runs.shape();
            return Err(to_py(KernelError::Parameter(format!(
                "runs must be an (n, 2) array of [start, end] pairs, got shape {shape:?}"
            ))));
        }
        let (runs, _) = runs.as_slice()?.as_chunks::<2>();
        Ok(run(py, runs.len(), || self.inner.pad_sum_runs(runs)))
    }

    /// The pad sum over the set bits of `words` (uint64, least significant
    /// bit first); bit k of word w stands for id `base + 64 w + k`.
    fn pad_sum_bitmap(
        &self,
        py: Python<'_>,
        base: u64,
        words: PyReadonlyArray1<'_, u64>,
    ) -> PyResult<u64> {
        let words = words.as_slice()?;
        Ok(run(py, words.len() * 8, || {
            self.inner.pad_sum_bitmap(base, words)
        }))
    }

    /// Per-block pad sums into `out` (uint64): `masks[r]`'s bit k stands
    /// for id `bases[r] + k`.
    fn pad_sums_blocks(
        &self,
        py: Python<'_>,
        bases: PyReadonlyArray1<'_, u64>,
        masks: PyReadonlyArray1<'_, u64>,
        out: &Bound<'_, PyArray1<u64>>,
    ) -> PyResult<()> {
        let mut out = out.readwrite();
        let (bases, masks, dst) = (bases.as_slice()?, masks.as_slice()?, out.as_slice_mut()?);
        run(py, masks.len() * 8, || {
            self.inner.pad_sums_blocks(bases, masks, dst)
        })
        .map_err(to_py)
    }

    fn __repr__(&self) -> &'static str {
        "AsheKey(...)"
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<AsheKey>()?;
    Ok(())
}
