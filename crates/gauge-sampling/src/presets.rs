//! presets (STUB)
