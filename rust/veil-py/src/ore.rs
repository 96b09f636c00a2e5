//! PyO3 glue for `veil_kernels::ore`: lists of integer keys in, lists of
//! ciphertext bytes out; comparisons of one left ciphertext with many right ones.

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;
use veil_kernels::ore::{self, Ore};

use crate::errors::to_py;

/// One Lewi–Wu ORE key; see `veil.documents.ore` for the public face. The
/// kernel's cipher keeps an rng, so calls take turns on it; each releases the
/// GIL (a batch is seconds of work, spread by the kernel over the cores).
#[pyclass(frozen, module = "veil._native")]
pub struct OreCipher {
    inner: Mutex<Ore>,
}

impl OreCipher {
    fn with<T>(&self, work: impl FnOnce(&Ore) -> T) -> T {
        let guard = self
            .inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        work(&guard)
    }
}

fn to_bytes(py: Python<'_>, ciphertexts: Vec<Vec<u8>>) -> Vec<Bound<'_, PyBytes>> {
    ciphertexts.iter().map(|c| PyBytes::new(py, c)).collect()
}

#[pymethods]
impl OreCipher {
    #[new]
    fn new(key: &[u8]) -> PyResult<Self> {
        let inner = Ore::new(key).map_err(to_py)?;
        Ok(Self {
            inner: Mutex::new(inner),
        })
    }

    /// Left ciphertexts (the client's, never stored) of unsigned 64-bit keys.
    fn encrypt_left<'py>(
        &self,
        py: Python<'py>,
        keys: Vec<u64>,
    ) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let out = py
            .allow_threads(|| self.with(|o| o.encrypt_left(&keys)))
            .map_err(to_py)?;
        Ok(to_bytes(py, out))
    }

    /// Right ciphertexts (randomised, stored) of unsigned 64-bit keys.
    fn encrypt_right<'py>(
        &self,
        py: Python<'py>,
        keys: Vec<u64>,
    ) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let out = py
            .allow_threads(|| self.with(|o| o.encrypt_right(&keys)))
            .map_err(to_py)?;
        Ok(to_bytes(py, out))
    }
}

/// How many of `rights` (sorted by plaintext) lie below `left`'s key
/// (at or below it, when `inclusive`).
#[pyfunction]
fn ore_rank(
    py: Python<'_>,
    left: &[u8],
    rights: Vec<PyBackedBytes>,
    inclusive: bool,
) -> PyResult<usize> {
    let refs: Vec<&[u8]> = rights.iter().map(|r| r.as_ref()).collect();
    py.allow_threads(|| ore::rank(left, &refs, inclusive))
        .map_err(to_py)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<OreCipher>()?;
    m.add_function(wrap_pyfunction!(ore_rank, m)?)?;
    Ok(())
}
