//! How long a job runs once started: the point the scheduler plans with ([`RunTime`]) and the
//! range it falls in ([`RunTimeRange`]), which forecasts give as the range of a start.

/// How long a job runs once started, in seconds, and whether that is what it declares (its
/// pods' `activeDeadlineSeconds`, which the kubelet enforces) or what the scheduler learned
/// from the jobs like it that finished ([`crate::run_times`], which nothing enforces).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunTime {
    /// Declared: the job cannot run longer.
    Declared(i64),
    /// Predicted from finished jobs: the job may run longer.
    Learned(i64),
}

impl RunTime {
    /// Seconds, however known.
    pub fn seconds(self) -> i64 {
        match self {
            RunTime::Declared(s) | RunTime::Learned(s) => s,
        }
    }

    /// Seconds, when declared.
    pub fn declared(self) -> Option<i64> {
        match self {
            RunTime::Declared(s) => Some(s),
            RunTime::Learned(_) => None,
        }
    }
}

/// The run time, counted from the job's start, that a job reaches with 80% confidence: at
/// least `low` and at most `high` seconds ([`crate::run_times::RunTimeHistory::predict`]).
/// A forecast plans every end at each bound to give the range of a start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunTimeRange {
    /// The run time it reaches at least (the 10th percentile).
    pub low: i64,
    /// The run time it reaches at most (the 90th percentile).
    pub high: i64,
}

impl RunTimeRange {
    /// The range of a job whose run time is `run_time`, given the range its learned runs say
    /// (`learned`): a learned run time's range, widened to hold the point; a declared run
    /// time is its range's upper end (the kubelet stops the pods then) and, with nothing
    /// learned of how much sooner it may end, its lower end too.
    pub fn of(run_time: RunTime, learned: Option<RunTimeRange>) -> RunTimeRange {
        let s = run_time.seconds();
        match (run_time, learned) {
            (RunTime::Declared(_), Some(r)) => RunTimeRange { low: r.low.min(s), high: s },
            (RunTime::Learned(_), Some(r)) => RunTimeRange { low: r.low.min(s), high: r.high.max(s) },
            (_, None) => RunTimeRange { low: s, high: s },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_declared_run_time_bounds_the_range_above_and_a_learned_one_lies_within_it() {
        let learned = Some(RunTimeRange { low: 100, high: 900 });
        assert_eq!(RunTimeRange::of(RunTime::Declared(600), learned), RunTimeRange { low: 100, high: 600 });
        assert_eq!(RunTimeRange::of(RunTime::Declared(50), learned), RunTimeRange { low: 50, high: 50 });
        assert_eq!(RunTimeRange::of(RunTime::Learned(1000), learned), RunTimeRange { low: 100, high: 1000 });
        assert_eq!(RunTimeRange::of(RunTime::Declared(600), None), RunTimeRange { low: 600, high: 600 });
    }
}
