//! Placeholder for the search scheme.
