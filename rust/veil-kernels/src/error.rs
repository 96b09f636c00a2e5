//! The one error type of the kernels; `veil-py` maps each variant to a
//! Python exception in a single place.

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum KernelError {
    /// A key of the wrong length was handed to a scheme.
    #[error("key must be {expected} bytes, got {got}")]
    KeyLength { expected: usize, got: usize },
    /// A plaintext outside the scheme's domain (e.g. too wide for FF1).
    #[error("value at row {row} is outside the domain {domain}")]
    Domain { row: usize, domain: String },
    /// Authentication failed: wrong key or tampered ciphertext.
    #[error("ciphertext at row {row} failed authentication (wrong key or tampered data)")]
    Authentication { row: usize },
    /// A ciphertext that is not in any format this version can read.
    #[error("ciphertext at row {row} is malformed: {reason}")]
    Malformed { row: usize, reason: String },
    /// Parameters that make no sense for the scheme.
    #[error("invalid parameter: {0}")]
    Parameter(String),
}
