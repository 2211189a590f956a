//! The scheduler configuration: which actions run in which order, and which plugins with
//! which arguments. Loaded from YAML (`config/scheduler.yaml` is the default) and partly
//! overridable per simulator scenario.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The default configuration file, compiled in so the binary works without it on disk.
pub const DEFAULT_CONFIG_YAML: &str = include_str!("../../config/scheduler.yaml");

/// An action of the scheduling cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionName {
    /// Admit pod groups whose queue can hold their minimum resources.
    Enqueue,
    /// Place admitted pod groups on idle capacity.
    Allocate,
    /// Evict lower-priority work in the same queue for a starving pod group.
    Preempt,
    /// Evict over-quota work of other queues for a starving pod group.
    Reclaim,
    /// Place what fits in capacity that blocked gangs do not need.
    Backfill,
    /// Move preemptible pods to other nodes so that a gang blocked by fragmented idle
    /// capacity fits (off by default).
    Consolidation,
    /// Restart elastic jobs at half their size when they cannot start, and at twice their
    /// size when spare capacity allows (jobs that ask for it; last in the list).
    Resize,
}

/// How unused capacity is divided among queues that want more than their quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FairShareMode {
    /// Water-filling by over-quota weight, never beyond a queue's demand.
    #[default]
    MaxMin,
    /// In proportion to over-quota weight x unmet demand (Determined's fair-share scheduler).
    DemandProportional,
}

/// Where pods go among nodes that fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PlacementStrategy {
    /// Fill used nodes first (fewest free resources after placement).
    #[default]
    Binpack,
    /// Prefer empty nodes (most free resources after placement).
    Spread,
}

/// The placement strategy for GPU and for CPU-only workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolPlacement {
    /// Strategy for pods that request GPUs.
    #[serde(default)]
    pub gpu: PlacementStrategy,
    /// Strategy for pods that request no GPU.
    #[serde(default)]
    pub cpu: PlacementStrategy,
}

/// Placement strategies: a default and per node pool overrides.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementConfig {
    /// Used for pools without an entry in `pools`.
    #[serde(default)]
    pub default: PoolPlacement,
    /// Per node pool (value of the `drover.dev/node-pool` label).
    #[serde(default)]
    pub pools: BTreeMap<String, PoolPlacement>,
}

impl PlacementConfig {
    /// The strategy for a pool and a workload class.
    pub fn strategy(&self, pool: &str, gpu: bool) -> PlacementStrategy {
        let p = self.pools.get(pool).unwrap_or(&self.default);
        if gpu {
            p.gpu
        } else {
            p.cpu
        }
    }
}

/// Arguments of the `drf` plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DrfConfig {
    /// Order jobs of equal priority in a queue by dominant resource share.
    #[serde(default)]
    pub job_order: bool,
    /// Order sibling queues by dominant resource share of the cluster instead of fair share.
    #[serde(default)]
    pub queue_order: bool,
}

/// A plugin entry of the configuration file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", content = "arguments", rename_all = "lowercase", deny_unknown_fields)]
pub enum PluginConfig {
    /// Job and task order by priority class; preemptibility.
    Priority,
    /// All-or-nothing pod groups.
    Gang,
    /// Hierarchical queues with quota, limit and fair share.
    Fairshare(#[serde(default)] FairShareArgs),
    /// Dominant-resource fairness ordering.
    Drf(#[serde(default)] DrfConfig),
    /// Static node filters and resource fit.
    Predicates,
    /// Bin-pack / spread node scoring.
    Nodeorder(#[serde(default)] PlacementConfig),
    /// Elastic pods of a job wait a minute after it lost pods to preemption or reclaim.
    Regrow,
    /// Per queue, at most so many jobs and pods running at once.
    Runninglimits,
    /// Per queue, no preemption or reclaim of a job before it ran a minimum time.
    Minruntime,
    /// Runtime-aware backfill: gangs that cannot start reserve the nodes where they will
    /// start soonest.
    Reservation(#[serde(default)] ReservationArgs),
    /// Job order by declared service (run time x GPUs), shortest first, with aging.
    Shortestfirst(#[serde(default)] ShortestFirstArgs),
}

/// Arguments of the `shortestfirst` plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ShortestFirstArgs {
    /// Seconds after its creation from which a job goes before every job that has waited
    /// less, oldest first, whatever its service.
    #[serde(default = "ShortestFirstArgs::default_aging_seconds")]
    pub aging_seconds: u32,
}

impl ShortestFirstArgs {
    fn default_aging_seconds() -> u32 {
        345_600
    }
}

impl Default for ShortestFirstArgs {
    fn default() -> Self {
        ShortestFirstArgs { aging_seconds: ShortestFirstArgs::default_aging_seconds() }
    }
}

/// Arguments of the `reservation` plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReservationArgs {
    /// How many waiting gangs, first in the order they are served, hold a reservation per
    /// cycle (each node is reserved for one gang at most).
    #[serde(default = "ReservationArgs::default_max_gangs")]
    pub max_gangs: u32,
    /// Seconds a gang must have waited since its creation before it may reserve (as Slurm's
    /// `bf_min_age_reserve`): until then, best-effort backfill alone serves it.
    #[serde(default)]
    pub min_wait_seconds: u32,
}

impl ReservationArgs {
    fn default_max_gangs() -> u32 {
        1
    }
}

impl Default for ReservationArgs {
    fn default() -> Self {
        ReservationArgs { max_gangs: ReservationArgs::default_max_gangs(), min_wait_seconds: 0 }
    }
}

/// Arguments of the `fairshare` plugin.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FairShareArgs {
    /// How unused capacity is divided.
    #[serde(default)]
    pub mode: FairShareMode,
    /// Whether, and how, past usage lowers a queue's share of unused capacity.
    #[serde(default)]
    pub time_based: TimeBasedArgs,
}

/// Time-based fair share (KAI's time-aware fairness, Slurm's half-life fair share): each
/// queue's usage is kept in a decayed ledger (Queue status `usage`), advanced once per tick,
/// and a queue that used more than its weight's part of the cluster lately gets less of the
/// capacity left after deserved quotas. Off unless `enabled`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TimeBasedArgs {
    /// Turns it on; the other fields have working defaults.
    #[serde(default)]
    pub enabled: bool,
    /// Seconds after which past usage counts half as much; 0: no decay (then `windowSeconds`
    /// must bound the memory).
    #[serde(default = "TimeBasedArgs::default_half_life")]
    pub half_life_seconds: u32,
    /// Length of the tumbling window the ledger remembers, in seconds (windows start at
    /// multiples of it on the clock); 0: no window, decay alone forgets.
    #[serde(default)]
    pub window_seconds: u32,
    /// Seconds between ledger updates; shares use the ledger of the last tick, so every
    /// cycle within a tick (and a new leader) computes the same shares.
    #[serde(default = "TimeBasedArgs::default_tick")]
    pub tick_seconds: u32,
    /// How much past usage weighs (KAI's `kValue`): 0 changes nothing, larger corrects harder.
    #[serde(default = "TimeBasedArgs::default_k_value")]
    pub k_value: f64,
}

impl TimeBasedArgs {
    fn default_half_life() -> u32 {
        86_400
    }

    fn default_tick() -> u32 {
        60
    }

    fn default_k_value() -> f64 {
        1.0
    }

    /// Why the settings cannot work, if they cannot.
    fn problem(&self) -> Option<&'static str> {
        if self.tick_seconds == 0 {
            Some("fairshare timeBased.tickSeconds must be at least 1")
        } else if self.half_life_seconds == 0 && self.window_seconds == 0 {
            Some("fairshare timeBased needs halfLifeSeconds or windowSeconds (else usage is never forgotten)")
        } else if !(self.k_value.is_finite() && self.k_value >= 0.0) {
            Some("fairshare timeBased.kValue must be a number of at least 0")
        } else if self.window_seconds != 0 && self.window_seconds < self.tick_seconds {
            Some("fairshare timeBased.windowSeconds must be 0 or at least tickSeconds")
        } else {
            None
        }
    }
}

impl Default for TimeBasedArgs {
    fn default() -> Self {
        TimeBasedArgs {
            enabled: false,
            half_life_seconds: TimeBasedArgs::default_half_life(),
            window_seconds: 0,
            tick_seconds: TimeBasedArgs::default_tick(),
            k_value: TimeBasedArgs::default_k_value(),
        }
    }
}

/// A full scheduler configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerConfig {
    /// Actions in the order they run each cycle.
    pub actions: Vec<ActionName>,
    /// Enabled plugins and their arguments.
    pub plugins: Vec<PluginConfig>,
}

/// Why a configuration is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The YAML does not describe a configuration.
    #[error("invalid scheduler configuration: {0}")]
    Yaml(#[from] serde_yaml::Error),
    /// A plugin or action appears twice.
    #[error("invalid scheduler configuration: {0} is listed twice")]
    Duplicate(String),
    /// A setting is out of its range.
    #[error("invalid scheduler configuration: {0}")]
    Invalid(&'static str),
}

impl SchedulerConfig {
    /// Parses and checks a configuration document.
    pub fn from_yaml(text: &str) -> Result<SchedulerConfig, ConfigError> {
        let config: SchedulerConfig = serde_yaml::from_str(text)?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), ConfigError> {
        for (i, a) in self.actions.iter().enumerate() {
            if self.actions[..i].contains(a) {
                return Err(ConfigError::Duplicate(format!("action {a:?}").to_lowercase()));
            }
        }
        for (i, p) in self.plugins.iter().enumerate() {
            if self.plugins[..i].iter().any(|q| std::mem::discriminant(p) == std::mem::discriminant(q)) {
                return Err(ConfigError::Duplicate(format!("plugin {}", p.name())));
            }
        }
        match self.fairshare().and_then(|f| f.time_based.problem()) {
            Some(problem) => Err(ConfigError::Invalid(problem)),
            None => Ok(()),
        }
    }

    /// Whether a plugin kind is enabled.
    pub fn has(&self, name: &str) -> bool {
        self.plugins.iter().any(|p| p.name() == name)
    }

    /// The fair-share arguments, when the plugin is enabled.
    pub fn fairshare(&self) -> Option<FairShareArgs> {
        self.plugins.iter().find_map(|p| match p {
            PluginConfig::Fairshare(a) => Some(*a),
            _ => None,
        })
    }

    /// Time-based fair share's settings, when the fair-share plugin has it on.
    pub fn time_based(&self) -> Option<TimeBasedArgs> {
        self.fairshare().map(|f| f.time_based).filter(|t| t.enabled)
    }

    /// Turns time-based fair share on in the fair-share plugin (keeping its other settings),
    /// enabling the plugin if it is not.
    pub fn enable_time_based(&mut self) {
        self.edit_fairshare(|args| args.time_based.enabled = true);
    }

    /// Applies per-scenario overrides.
    pub fn apply(&mut self, o: &ConfigOverrides) {
        if let Some(actions) = &o.actions {
            self.actions = actions.clone();
        }
        if let Some(mode) = o.fair_share {
            self.edit_fairshare(|args| args.mode = mode);
        }
        if let Some(placement) = &o.placement {
            let config = match placement {
                PlacementOverride::Strategy(s) => {
                    PlacementConfig { default: PoolPlacement { gpu: *s, cpu: *s }, pools: BTreeMap::new() }
                }
                PlacementOverride::Full(c) => c.clone(),
            };
            self.set_plugin(PluginConfig::Nodeorder(config));
        }
        if let Some(drf) = o.drf {
            self.set_plugin(PluginConfig::Drf(drf));
        }
        if let Some(time_based) = o.time_based {
            self.edit_fairshare(|args| args.time_based = time_based);
        }
    }

    /// Changes the fair-share plugin's arguments in place, enabling it (with its defaults
    /// first) if it is not.
    fn edit_fairshare(&mut self, edit: impl FnOnce(&mut FairShareArgs)) {
        let mut args = self.fairshare().unwrap_or_default();
        edit(&mut args);
        self.set_plugin(PluginConfig::Fairshare(args));
    }

    fn set_plugin(&mut self, plugin: PluginConfig) {
        match self.plugins.iter_mut().find(|p| p.name() == plugin.name()) {
            Some(slot) => *slot = plugin,
            None => self.plugins.push(plugin),
        }
    }
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig::from_yaml(DEFAULT_CONFIG_YAML).expect("the bundled default configuration is valid")
    }
}

impl PluginConfig {
    /// The plugin's configuration name.
    pub fn name(&self) -> &'static str {
        match self {
            PluginConfig::Priority => "priority",
            PluginConfig::Gang => "gang",
            PluginConfig::Fairshare(_) => "fairshare",
            PluginConfig::Drf(_) => "drf",
            PluginConfig::Predicates => "predicates",
            PluginConfig::Nodeorder(_) => "nodeorder",
            PluginConfig::Regrow => "regrow",
            PluginConfig::Runninglimits => "runninglimits",
            PluginConfig::Minruntime => "minruntime",
            PluginConfig::Reservation(_) => "reservation",
            PluginConfig::Shortestfirst(_) => "shortestfirst",
        }
    }
}

/// A placement override: one strategy for everything, or a full placement configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PlacementOverride {
    /// `placement: binpack` or `placement: spread`.
    Strategy(PlacementStrategy),
    /// `placement: {default: {gpu: binpack, cpu: spread}, pools: {...}}`.
    Full(PlacementConfig),
}

/// The parts of the configuration a scenario may override (`config:` in a scenario file).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConfigOverrides {
    /// Actions in order.
    #[serde(default)]
    pub actions: Option<Vec<ActionName>>,
    /// Placement strategy.
    #[serde(default)]
    pub placement: Option<PlacementOverride>,
    /// Fair-share mode.
    #[serde(default)]
    pub fair_share: Option<FairShareMode>,
    /// Dominant-resource fairness ordering.
    #[serde(default)]
    pub drf: Option<DrfConfig>,
    /// Time-based fair share's settings.
    #[serde(default)]
    pub time_based: Option<TimeBasedArgs>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_runs_all_six_actions_in_order() {
        let c = SchedulerConfig::default();
        assert_eq!(
            c.actions,
            [
                ActionName::Enqueue,
                ActionName::Allocate,
                ActionName::Preempt,
                ActionName::Reclaim,
                ActionName::Backfill,
                ActionName::Resize
            ]
        );
        for p in ["priority", "gang", "fairshare", "drf", "predicates", "nodeorder", "reservation"] {
            assert!(c.has(p), "{p} enabled by default");
        }
    }

    #[test]
    fn overrides_replace_actions_and_plugin_arguments() {
        let mut c = SchedulerConfig::default();
        let o: ConfigOverrides =
            serde_yaml::from_str("{actions: [enqueue, allocate], placement: spread, fairShare: demandProportional}")
                .unwrap();
        c.apply(&o);
        assert_eq!(c.actions, [ActionName::Enqueue, ActionName::Allocate]);
        assert_eq!(c.fairshare().unwrap().mode, FairShareMode::DemandProportional);
        assert!(c.plugins.contains(&PluginConfig::Nodeorder(PlacementConfig {
            default: PoolPlacement { gpu: PlacementStrategy::Spread, cpu: PlacementStrategy::Spread },
            pools: BTreeMap::new()
        })));
    }

    #[test]
    fn rejects_unknown_and_duplicate_entries() {
        assert!(SchedulerConfig::from_yaml("actions: [allocate, teleport]\nplugins: []").is_err());
        assert!(SchedulerConfig::from_yaml("actions: [allocate, allocate]\nplugins: []").is_err());
        assert!(SchedulerConfig::from_yaml("actions: []\nplugins: [{name: gang}, {name: gang}]").is_err());
        assert!(serde_yaml::from_str::<ConfigOverrides>("{placment: spread}").is_err());
    }
}
