//! gauge-engine (skeleton)
