//! Placeholder for the ff1 scheme.
