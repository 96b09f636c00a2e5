//! PyO3 glue for `veil_kernels::ff1`: FF1 over integer columns (numpy
//! int32/int64 in and out, written into a caller-provided array) and over
//! numeral strings (for the NIST known-answer samples).

use numpy::{Element, PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use veil_kernels::ff1::{Ff1, Ff1Binary, Lane};
use veil_kernels::KernelError;

use crate::errors::to_py;

/// Adds `base` to the row an error names, so that a chunk's errors name the
/// row in the whole column.
pub(crate) fn shift_row(err: KernelError, base: usize) -> KernelError {
    match err {
        KernelError::Domain { row, domain } => KernelError::Domain {
            row: row + base,
            domain,
        },
        KernelError::Authentication { row } => KernelError::Authentication { row: row + base },
        KernelError::Malformed { row, reason } => KernelError::Malformed {
            row: row + base,
            reason,
        },
        other => other,
    }
}

/// A 1-D numpy array of int32 or int64 (integer values, Arrow offsets).
#[derive(FromPyObject)]
pub(crate) enum IntArray<'py> {
    Narrow(Bound<'py, PyArray1<i32>>),
    Wide(Bound<'py, PyArray1<i64>>),
}

/// FF1 in radix 2 over signed `bits`-bit integers (DET for integer columns).
#[pyclass(frozen, module = "veil._native")]
pub struct Ff1Int {
    pub(crate) inner: Ff1Binary,
}

#[pymethods]
impl Ff1Int {
    #[new]
    #[pyo3(signature = (key, bits, tweak = b"".as_slice()))]
    fn new(key: &[u8], bits: u32, tweak: &[u8]) -> PyResult<Self> {
        Ok(Self {
            inner: Ff1Binary::new(key, bits, tweak).map_err(to_py)?,
        })
    }

    /// Encrypts (or, with `encrypt=False`, decrypts) int32/int64 `values`
    /// into `out` (int32 or int64, same length).
    #[pyo3(signature = (encrypt, values, out, row_base = 0))]
    fn run(
        &self,
        py: Python<'_>,
        encrypt: bool,
        values: IntArray<'_>,
        out: IntArray<'_>,
        row_base: usize,
    ) -> PyResult<()> {
        let job = Job {
            cipher: &self.inner,
            encrypt,
            row_base,
        };
        match (values, out) {
            (IntArray::Narrow(v), IntArray::Narrow(o)) => job.run(py, &v, &o),
            (IntArray::Narrow(v), IntArray::Wide(o)) => job.run(py, &v, &o),
            (IntArray::Wide(v), IntArray::Narrow(o)) => job.run(py, &v, &o),
            (IntArray::Wide(v), IntArray::Wide(o)) => job.run(py, &v, &o),
        }
    }

    #[getter]
    fn domain(&self) -> String {
        self.inner.domain()
    }

    fn __repr__(&self) -> String {
        format!("Ff1Int(bits={})", self.inner.bits())
    }
}

/// One batch call of [`Ff1Int::run`].
struct Job<'a> {
    cipher: &'a Ff1Binary,
    encrypt: bool,
    row_base: usize,
}

impl Job<'_> {
    fn run<I: Lane + Element, O: Lane + Element>(
        &self,
        py: Python<'_>,
        values: &Bound<'_, PyArray1<I>>,
        out: &Bound<'_, PyArray1<O>>,
    ) -> PyResult<()> {
        let values = values.readonly();
        let mut out = out.readwrite();
        let (src, dst) = (values.as_slice()?, out.as_slice_mut()?);
        let (cipher, encrypt) = (self.cipher, self.encrypt);
        py.allow_threads(|| {
            if encrypt {
                cipher.encrypt(src, dst)
            } else {
                cipher.decrypt(src, dst)
            }
        })
        .map_err(|err| to_py(shift_row(err, self.row_base)))
    }
}

/// FF1 encryption (or, with `encrypt=False`, decryption) of one numeral
/// string, each numeral below `radix`. For the NIST known-answer samples.
#[pyfunction]
fn ff1_numerals(
    encrypt: bool,
    key: &[u8],
    radix: u32,
    tweak: &[u8],
    numerals: Vec<u16>,
) -> PyResult<Vec<u16>> {
    let ff1 = Ff1::new(key).map_err(to_py)?;
    let result = if encrypt {
        ff1.encrypt(radix, tweak, &numerals)
    } else {
        ff1.decrypt(radix, tweak, &numerals)
    };
    result.map_err(to_py)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Ff1Int>()?;
    m.add_function(wrap_pyfunction!(ff1_numerals, m)?)?;
    Ok(())
}
