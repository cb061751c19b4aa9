//! params (STUB)
