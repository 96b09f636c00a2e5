//! PyO3 glue for `veil_kernels::siv`: AES-SIV DET over Arrow binary
//! layouts handed over as numpy views (offsets int32/int64, data uint8,
//! validity bitmap uint8), writing into caller-provided output arrays.

use numpy::{Element, PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use veil_kernels::siv::{
    rfc5297_open, rfc5297_seal, BinaryColumn, BinaryOutput, DetBytes, Offset, Validity,
};

use crate::errors::to_py;
use crate::ff1::{shift_row, IntArray};

/// The parts of one batch call other than the offsets.
struct Batch<'a> {
    data: &'a [u8],
    validity: Option<Validity<'a>>,
    out_data: &'a mut [u8],
    encrypt: bool,
}

/// AES-SIV DET for byte strings (format `0x01 || SIV || ciphertext`).
#[pyclass(frozen, module = "veil._native")]
pub struct SivBytes {
    pub(crate) inner: DetBytes,
}

#[pymethods]
impl SivBytes {
    #[new]
    fn new(key: &[u8]) -> PyResult<Self> {
        Ok(Self {
            inner: DetBytes::new(key).map_err(to_py)?,
        })
    }

    /// Encrypts (or, with `encrypt=False`, decrypts) the column; returns
    /// the number of bytes written to `out_data`. Decryption needs at most as
    /// many output bytes as the input data holds.
    #[pyo3(signature = (encrypt, offsets, data, validity, validity_offset, out_offsets, out_data, row_base = 0))]
    #[allow(clippy::too_many_arguments)] // mirrors the Arrow buffers one to one
    fn run(
        &self,
        py: Python<'_>,
        encrypt: bool,
        offsets: IntArray<'_>,
        data: PyReadonlyArray1<'_, u8>,
        validity: Option<PyReadonlyArray1<'_, u8>>,
        validity_offset: usize,
        out_offsets: IntArray<'_>,
        out_data: &Bound<'_, PyArray1<u8>>,
        row_base: usize,
    ) -> PyResult<usize> {
        let mut out = out_data.readwrite();
        let validity = match &validity {
            Some(bits) => Some(Validity {
                bits: bits.as_slice()?,
                offset: validity_offset,
            }),
            None => None,
        };
        let batch = Batch {
            data: data.as_slice()?,
            validity,
            out_data: out.as_slice_mut()?,
            encrypt,
        };
        self.dispatch(py, offsets, out_offsets, batch, row_base)
    }

    fn __repr__(&self) -> &'static str {
        "SivBytes(<key hidden>)"
    }
}

impl SivBytes {
    fn dispatch(
        &self,
        py: Python<'_>,
        offsets: IntArray<'_>,
        out_offsets: IntArray<'_>,
        batch: Batch<'_>,
        row_base: usize,
    ) -> PyResult<usize> {
        match (offsets, out_offsets) {
            (IntArray::Narrow(i), IntArray::Narrow(o)) => {
                self.run_typed(py, &i, &o, batch, row_base)
            }
            (IntArray::Narrow(i), IntArray::Wide(o)) => self.run_typed(py, &i, &o, batch, row_base),
            (IntArray::Wide(i), IntArray::Narrow(o)) => self.run_typed(py, &i, &o, batch, row_base),
            (IntArray::Wide(i), IntArray::Wide(o)) => self.run_typed(py, &i, &o, batch, row_base),
        }
    }

    fn run_typed<I: Offset + Element, O: Offset + Element>(
        &self,
        py: Python<'_>,
        offsets: &Bound<'_, PyArray1<I>>,
        out_offsets: &Bound<'_, PyArray1<O>>,
        batch: Batch<'_>,
        row_base: usize,
    ) -> PyResult<usize> {
        let offsets = offsets.readonly();
        let mut out_offsets = out_offsets.readwrite();
        let input = BinaryColumn {
            offsets: offsets.as_slice()?,
            data: batch.data,
            validity: batch.validity,
        };
        let out = BinaryOutput {
            offsets: out_offsets.as_slice_mut()?,
            data: batch.out_data,
        };
        let det = &self.inner;
        py.allow_threads(|| {
            if batch.encrypt {
                det.encrypt(input, out)
            } else {
                det.decrypt(input, out)
            }
        })
        .map_err(|err| to_py(shift_row(err, row_base)))
    }
}

fn header_slices(headers: &[Vec<u8>]) -> Vec<&[u8]> {
    headers.iter().map(Vec::as_slice).collect()
}

/// RFC 5297 AES-SIV of one message with header components (AD, nonce):
/// `SIV || ciphertext`, without Veil's version byte. For known-answer tests.
#[pyfunction]
fn aes_siv_seal<'py>(
    py: Python<'py>,
    key: &[u8],
    headers: Vec<Vec<u8>>,
    plaintext: &[u8],
) -> PyResult<Bound<'py, PyBytes>> {
    let sealed = rfc5297_seal(key, &header_slices(&headers), plaintext).map_err(to_py)?;
    Ok(PyBytes::new(py, &sealed))
}

/// Inverse of `aes_siv_seal`; raises the native authentication error.
#[pyfunction]
fn aes_siv_open<'py>(
    py: Python<'py>,
    key: &[u8],
    headers: Vec<Vec<u8>>,
    sealed: &[u8],
) -> PyResult<Bound<'py, PyBytes>> {
    let opened = rfc5297_open(key, &header_slices(&headers), sealed).map_err(to_py)?;
    Ok(PyBytes::new(py, &opened))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SivBytes>()?;
    m.add_function(wrap_pyfunction!(aes_siv_seal, m)?)?;
    m.add_function(wrap_pyfunction!(aes_siv_open, m)?)?;
    Ok(())
}
