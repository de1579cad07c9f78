//! Emulator placeholder.
