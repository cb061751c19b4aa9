//! order (STUB)
