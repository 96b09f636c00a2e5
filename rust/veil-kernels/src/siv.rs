//! Placeholder for the siv scheme.
