//! Placeholder for the rnd scheme.
