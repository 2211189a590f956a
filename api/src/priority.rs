//! Priority classes: a name, a value (higher runs first) and whether work of the class may
//! be preempted or reclaimed.

/// Values at or above this are non-preemptible unless the class says otherwise
/// (the Run:ai convention Drover follows).
pub const NON_PREEMPTIBLE_THRESHOLD: i32 = 100;

/// A priority class as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityClass {
    /// The class name that jobs refer to.
    pub name: String,
    /// Higher values are scheduled first and may preempt lower ones in the same queue.
    pub value: i32,
    /// Whether pods of this class may be preempted or reclaimed.
    pub preemptible: bool,
}

impl PriorityClass {
    /// A class whose preemptibility follows the value threshold unless `preemptible` is given.
    pub fn new(name: &str, value: i32, preemptible: Option<bool>) -> PriorityClass {
        PriorityClass {
            name: name.to_string(),
            value,
            preemptible: preemptible.unwrap_or(value < NON_PREEMPTIBLE_THRESHOLD),
        }
    }
}

/// The classes every Drover installation has: (name, value), lowest first.
pub const BUILTIN_PRIORITY_CLASSES: [(&str, i32); 4] =
    [("train", 50), ("interactive-preemptible", 75), ("build", 100), ("inference", 125)];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preemptibility_follows_the_threshold_unless_overridden() {
        assert!(PriorityClass::new("train", 50, None).preemptible);
        assert!(!PriorityClass::new("build", 100, None).preemptible);
        assert!(PriorityClass::new("batch-high", 150, Some(true)).preemptible);
        assert!(!PriorityClass::new("notebook", 10, Some(false)).preemptible);
    }
}
