//! Types shared by the scheduling core, the simulator and (later) the Kubernetes edges.
//!
//! Everything here is plain data: no I/O, no async. Quantities are exact integers so that
//! fit checks never depend on floating-point rounding.

pub mod charge_guard;
pub mod constraints;
pub mod crd;
pub mod label_selector;
pub mod labels;
pub mod priority;
pub mod quantity;
pub mod resources;
pub mod topology;

pub use constraints::{
    tolerates_all, NodeSelectorOperator, NodeSelectorRequirement, Taint, TaintEffect, Toleration, TolerationOperator,
};
pub use priority::{PriorityClass, BUILTIN_PRIORITY_CLASSES, NON_PREEMPTIBLE_THRESHOLD};
pub use quantity::{Quantity, QuantityError};
pub use resources::{
    format_amount, human_amount, ResourceError, ResourceKind, ResourceList, CPU, GPU, MEMORY, NODE_POOL_LABEL, PODS,
};
