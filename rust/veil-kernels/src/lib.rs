//! Veil's encryption schemes, in pure Rust with no Python glue.
//!
//! One scheme per module. Every function here works on whole columns
//! (slices in, preallocated buffers out) because the callers encrypt and
//! decrypt entire Arrow columns at a time.

pub mod error;

pub use error::KernelError;
