//! Policy plugins. Each supplies some of the framework's hooks; the configuration decides
//! which are enabled and in which order their orderings are consulted, and [`build`] is the
//! one place that knows every plugin type.

use crate::config::{PluginConfig, SchedulerConfig};
use std::fmt;

use crate::plugin::Plugin;
use crate::why::{Advice, AdviceFacts, Ending, Why, Words};

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

/// Every plugin's words for its own rules, asked in turn: each answers for its rules only.
const WORDS: [Words; 8] = [
    fairshare::words,
    gang::words,
    minruntime::words,
    predicates::words,
    priority::words,
    regrow::words,
    reservation::words,
    runninglimits::words,
];

impl fmt::Display for Why<'_> {
    /// The reason text the scheduler reports: the words of the plugin that owns the rule, then
    /// the deciding bound's figures where the words do not say them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let subject = self.subject_name();
        let ending = WORDS.iter().find_map(|words| words(self, &subject, f));
        match ending {
            Some(ending) => {
                if ending? == Ending::Figures {
                    self.write_figures(f)?;
                }
                Ok(())
            }
            None => write!(f, "{:?} ({subject})", self.rule),
        }
    }
}

/// Every plugin's advice on refusals by its own rules, asked in turn.
const ADVICE: [Advice; 4] = [fairshare::advice, gang::advice, predicates::advice, regrow::advice];

/// What would let a job refused as `facts` says start, in the words of the plugin whose rule
/// refused it; `None` when that plugin has nothing better than the general advice.
pub fn advice(facts: &AdviceFacts) -> Option<String> {
    ADVICE.iter().find_map(|advice| advice(facts))
}
