//! trace (STUB)
