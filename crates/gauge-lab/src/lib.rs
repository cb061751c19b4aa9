//! gauge-lab (skeleton)
