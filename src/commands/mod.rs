pub mod apply;
pub mod demo;
pub mod diff;
pub mod run;
pub mod runs;
