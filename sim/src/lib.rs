//! `drover sim`: the scheduling core on a scenario file, no Kubernetes needed. The scenario
//! format is the contract in `scenario-format.md`; [`scenario`] reads and validates it,
//! [`run`] runs cycles, [`report`] prints results and [`check`] compares them with `expect`.

pub mod check;
pub mod report;
pub mod run;
pub mod scenario;
pub mod synthetic;
pub mod trace;
