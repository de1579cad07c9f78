pub mod apply;
pub mod diff;
pub mod run;
pub mod runs;
