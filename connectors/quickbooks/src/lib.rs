//! QuickBooks Online (Intuit's Accounting API v3).

#[cfg(feature = "emulator")]
pub mod emulator;
