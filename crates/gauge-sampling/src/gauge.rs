//! gauge (STUB)
