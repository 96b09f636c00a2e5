//! Placeholder for the ecb scheme.
