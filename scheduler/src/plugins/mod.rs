//! Policy plugins. Each supplies some of the framework's hooks; the configuration decides
//! which are enabled and in which order their orderings are consulted, and [`build`] is the
//! one place that knows every plugin type.

use crate::config::{PluginConfig, SchedulerConfig};
use crate::plugin::Plugin;

pub mod drf;
pub mod fairshare;
pub mod gang;
pub mod minruntime;
pub mod nodeorder;
pub mod predicates;
pub mod priority;
pub mod regrow;
pub mod reservation;
pub mod runninglimits;
pub mod shortestfirst;

/// Instantiates the plugins a configuration enables, in its order. When DRF orders queues,
/// fair share leaves the queue order to it.
pub fn build(config: &SchedulerConfig) -> Vec<Box<dyn Plugin>> {
    let drf_queue_order = config.plugins.iter().any(|p| matches!(p, PluginConfig::Drf(d) if d.queue_order));
    let plugin = |p: &PluginConfig| -> Box<dyn Plugin> {
        match p {
            PluginConfig::Priority => Box::new(priority::Priority),
            PluginConfig::Gang => Box::new(gang::Gang),
            PluginConfig::Fairshare(args) => Box::new(fairshare::FairShare::new(*args, drf_queue_order)),
            PluginConfig::Drf(args) => Box::new(drf::Drf::new(*args)),
            PluginConfig::Predicates => Box::new(predicates::Predicates::default()),
            PluginConfig::Nodeorder(args) => Box::new(nodeorder::NodeOrder::new(args.clone())),
            PluginConfig::Regrow => Box::new(regrow::Regrow),
            PluginConfig::Runninglimits => Box::new(runninglimits::RunningLimits::default()),
            PluginConfig::Minruntime => Box::new(minruntime::MinRuntime),
            PluginConfig::Reservation(args) => Box::new(reservation::ReservationPolicy::new(*args)),
            PluginConfig::Shortestfirst(args) => Box::new(shortestfirst::ShortestFirst::new(*args)),
        }
    };
    config.plugins.iter().map(plugin).collect()
}
