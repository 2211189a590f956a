//! `drover sim`: the scheduling core on a scenario file, no Kubernetes needed.
pub mod scenario;
