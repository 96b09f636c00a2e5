//! Placeholder for the ope scheme.
