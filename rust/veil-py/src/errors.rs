//! The one place where kernel errors become Python exceptions.
//!
//! The Python side (`veil.errors`) re-raises these as Veil's public
//! exception classes with advice on what to do.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use veil_kernels::KernelError;

create_exception!(_native, NativeError, PyException);
create_exception!(_native, NativeDomainError, NativeError);
create_exception!(_native, NativeAuthenticationError, NativeError);
create_exception!(_native, NativeMalformedError, NativeError);
create_exception!(_native, NativeParameterError, NativeError);

#[allow(dead_code)] // used by the scheme modules as they land
pub fn to_py(err: KernelError) -> PyErr {
    let msg = err.to_string();
    match err {
        KernelError::Domain { .. } => NativeDomainError::new_err(msg),
        KernelError::Authentication { .. } => NativeAuthenticationError::new_err(msg),
        KernelError::Malformed { .. } => NativeMalformedError::new_err(msg),
        KernelError::KeyLength { .. } | KernelError::Parameter(_) => {
            NativeParameterError::new_err(msg)
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("NativeError", py.get_type::<NativeError>())?;
    m.add("NativeDomainError", py.get_type::<NativeDomainError>())?;
    m.add(
        "NativeAuthenticationError",
        py.get_type::<NativeAuthenticationError>(),
    )?;
    m.add(
        "NativeMalformedError",
        py.get_type::<NativeMalformedError>(),
    )?;
    m.add(
        "NativeParameterError",
        py.get_type::<NativeParameterError>(),
    )?;
    Ok(())
}
