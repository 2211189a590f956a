//! Drover's scheduling core: a pure, synchronous library. A [`snapshot::Snapshot`] of the
//! cluster goes in; [`cycle::run_cycle`] runs the configured actions through the enabled
//! plugins and returns decisions (bindings, evictions) and the reason every waiting pod
//! group waits. Nothing here performs I/O, so the same code serves the Kubernetes scheduler,
//! the simulator, the benchmarks and the tests.

pub mod actions;
pub mod carry;
pub mod clock;
pub mod config;
pub mod cycle;
pub mod domain_index;
pub mod explain;
pub mod forecast;
pub mod framework;
pub mod ids;
pub mod node_index;
pub mod placement;
pub mod plugin;
pub mod plugins;
pub mod queue_state;
pub mod recovery;
pub mod res;
pub mod reservation;
pub mod run_times;
pub mod session;
pub mod share_division;
pub mod snapshot;
#[cfg(test)]
mod test_cluster;
pub mod topology_placement;
pub mod usage;
pub mod why;
