//! PyO3 glue for `veil_kernels::ope`: numpy columns in and out.
//!
//! Plaintexts travel as int64 or uint64 arrays; ciphertexts as int64 arrays
//! (cipher_bits <= 63) or as one flat uint8 buffer of fixed-width binary
//! values that Python wraps into an Arrow BinaryArray without copying.
//!
//! Encryption runs without the GIL, so that a load's encrypting threads (one
//! cipher each) and its inserting thread run at once (issue 40: a TPC-DS table's
//! OPE columns held it for a fifth of its load). The key's caches sit behind a
//! mutex, taken without the GIL: a cipher used from two threads makes one wait,
//! where a `&mut self` method would raise "already borrowed" in the other.

use std::sync::{Mutex, MutexGuard, PoisonError};

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use veil_kernels::hgd;
use veil_kernels::ope::Ope;

use crate::errors::to_py;

/// A plaintext column of either integer signedness.
#[derive(FromPyObject)]
enum Plaintexts<'py> {
    Signed(PyReadonlyArray1<'py, i64>),
    Unsigned(PyReadonlyArray1<'py, u64>),
}

type Mask<'py> = Option<PyReadonlyArray1<'py, bool>>;

/// One OPE key with its caches; see `veil.crypto.ope.Ope` for the public face.
#[pyclass(module = "veil._native", name = "OpeCipher")]
pub struct OpeCipher {
    inner: Mutex<Ope>,
}

impl OpeCipher {
    /// The key and its caches (a panic mid-encryption leaves caches of whole pairs only).
    fn key(&self) -> MutexGuard<'_, Ope> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn encrypt_all(
        &self,
        py: Python<'_>,
        values: &Plaintexts,
        valid: &Mask,
    ) -> PyResult<Vec<u128>> {
        let valid = valid.as_ref().map(|v| v.as_slice()).transpose()?;
        let result = match values {
            Plaintexts::Signed(v) => {
                let v = v.as_slice()?;
                let mut out = vec![0u128; v.len()];
                py.allow_threads(|| self.key().encrypt_column(v, valid, &mut out))
                    .map(|_| out)
            }
            Plaintexts::Unsigned(v) => {
                let v = v.as_slice()?;
                let mut out = vec![0u128; v.len()];
                py.allow_threads(|| self.key().encrypt_column(v, valid, &mut out))
                    .map(|_| out)
            }
        };
        result.map_err(to_py)
    }

    fn decrypt_all(
        &self,
        ciphertexts: impl ExactSizeIterator<Item = Option<u128>>,
        valid: &Mask,
    ) -> PyResult<Vec<u64>> {
        let valid = valid.as_ref().map(|v| v.as_slice()).transpose()?;
        let mut plain = vec![0i128; ciphertexts.len()];
        self.key()
            .decrypt_column(ciphertexts, valid, &mut plain)
            .map_err(to_py)?;
        // Two's complement bits: Python views them as int64 or uint64.
        Ok(plain.into_iter().map(|p| p as u64).collect())
    }
}

#[pymethods]
impl OpeCipher {
    #[new]
    #[pyo3(signature = (key, bits, signed, cipher_bits=None))]
    fn new(key: &[u8], bits: u32, signed: bool, cipher_bits: Option<u32>) -> PyResult<Self> {
        let inner = match cipher_bits {
            Some(cipher_bits) => Ope::with_cipher_bits(key, bits, cipher_bits, signed),
            None => Ope::new(key, bits, signed),
        }
        .map_err(to_py)?;
        Ok(Self {
            inner: Mutex::new(inner),
        })
    }

    #[getter]
    fn cipher_bits(&self) -> u32 {
        self.key().cipher_bits()
    }

    #[getter]
    fn binary_width(&self) -> usize {
        self.key().binary_width()
    }

    #[getter]
    fn domain(&self) -> String {
        self.key().domain()
    }

    /// Ciphertexts as int64 (only for cipher_bits <= 63).
    #[pyo3(signature = (values, valid=None))]
    fn encrypt_int64<'py>(
        &self,
        py: Python<'py>,
        values: Plaintexts<'py>,
        valid: Mask<'py>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let cs = self.encrypt_all(py, &values, &valid)?;
        Ok(cs
            .into_iter()
            .map(|c| c as i64)
            .collect::<Vec<_>>()
            .into_pyarray(py))
    }

    /// Ciphertexts in binary form, concatenated (`binary_width` bytes each).
    #[pyo3(signature = (values, valid=None))]
    fn encrypt_binary<'py>(
        &self,
        py: Python<'py>,
        values: Plaintexts<'py>,
        valid: Mask<'py>,
    ) -> PyResult<Bound<'py, PyArray1<u8>>> {
        let cs = self.encrypt_all(py, &values, &valid)?;
        let key = self.key();
        let width = key.binary_width();
        let mut out = vec![0u8; cs.len() * width];
        for (c, slot) in cs.into_iter().zip(out.chunks_exact_mut(width)) {
            key.write_binary(c, slot);
        }
        Ok(out.into_pyarray(py))
    }

    /// Plaintext bits (int64 or uint64 pattern) of int64 ciphertexts.
    #[pyo3(signature = (ciphertexts, valid=None))]
    fn decrypt_int64<'py>(
        &self,
        py: Python<'py>,
        ciphertexts: PyReadonlyArray1<'py, i64>,
        valid: Mask<'py>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let cs = ciphertexts.as_slice()?;
        let parsed = cs.iter().map(|&c| u128::try_from(c).ok());
        Ok(self.decrypt_all(parsed, &valid)?.into_pyarray(py))
    }

    /// Plaintext bits of binary ciphertexts given as Arrow data + offsets.
    #[pyo3(signature = (data, offsets, valid=None))]
    fn decrypt_binary<'py>(
        &self,
        py: Python<'py>,
        data: PyReadonlyArray1<'py, u8>,
        offsets: PyReadonlyArray1<'py, i64>,
        valid: Mask<'py>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let (data, offsets) = (data.as_slice()?, offsets.as_slice()?);
        let parsed: Vec<_> = {
            let key = self.key();
            let read = offsets.windows(2).map(|w| {
                let bytes = data.get(w[0] as usize..w[1] as usize)?;
                key.read_binary(bytes)
            });
            read.collect()
        };
        Ok(self
            .decrypt_all(parsed.into_iter(), &valid)?
            .into_pyarray(py))
    }
}

/// `count` hypergeometric samples from one ChaCha20 stream (for tests).
#[pyfunction]
fn ope_hgd_sample(
    good: u128,
    bad: u128,
    draws: u128,
    seed: [u8; 32],
    count: usize,
) -> PyResult<Vec<u128>> {
    hgd::sample_seeded(good, bad, draws, seed, count).map_err(to_py)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<OpeCipher>()?;
    m.add_function(wrap_pyfunction!(ope_hgd_sample, m)?)?;
    Ok(())
}
