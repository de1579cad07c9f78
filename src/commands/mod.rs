pub mod apply;
pub mod check;
pub mod demo;
pub mod diff;
pub mod history;
pub mod report;
pub mod run;
pub mod runs;
