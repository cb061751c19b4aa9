//! sort (STUB)
