//! Veil's encryption schemes, in pure Rust with no Python glue.
//!
//! One scheme per module. Every function here works on whole columns
//! (slices in, preallocated buffers out) because the callers encrypt and
//! decrypt entire Arrow columns at a time.

pub mod ashe;
pub mod binary;
pub mod bsoncols;
pub mod ecb;
pub mod error;
pub mod ff1;
pub mod hgd;
pub mod joinadj;
pub mod kvpack;
pub mod ope;
pub mod ore;
pub mod paillier;
pub mod rnd;
pub mod rowrnd;
pub mod search;
pub mod siv;

pub use error::KernelError;
