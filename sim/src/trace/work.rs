//! How long a trace job runs at the size it runs with. The trace's `duration_s` at the size
//! it asked for is its work, in pod-seconds (`duration_s × num_pods`); with `s` pods it
//! progresses `s` pod-seconds a second (linear scaling), so at its asked size it runs exactly
//! `duration_s` and at half of it twice as long. Work done before an elastic restart is kept
//! (elastic frameworks checkpoint when they resize); work done before an eviction is lost.

/// A job's work left and the pods it runs with now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    /// Pod-seconds left, as of its last (re)start.
    left: i64,
    /// Pods it runs with.
    pods: u32,
}

impl Work {
    /// The work of a job that runs `duration` seconds with the `pods` pods it asks for.
    pub fn new(duration: i64, pods: u32) -> Work {
        Work { left: duration * i64::from(pods), pods }
    }

    /// Pods it runs with now.
    pub fn pods(self) -> u32 {
        self.pods
    }

    /// Seconds it runs from a (re)start at its present size to the end of its work, rounded
    /// up to a whole second: what it declares to the scheduler, and when it ends.
    pub fn run_time(self) -> i64 {
        let pods = i64::from(self.pods.max(1));
        (self.left + pods - 1) / pods
    }

    /// Keeps the progress of `seconds` run at its present size (a checkpoint on restart).
    pub fn progress(&mut self, seconds: i64) {
        self.left = (self.left - seconds * i64::from(self.pods)).max(0);
    }

    /// Runs with `pods` pods from its next start.
    pub fn resize(&mut self, pods: u32) {
        self.pods = pods;
    }
}

#[cfg(test)]
mod tests {
    use super::Work;

    #[test]
    fn half_the_pods_take_twice_as_long_for_the_work_left() {
        let mut w = Work::new(100, 4);
        assert_eq!(w.run_time(), 100, "at its asked size, the trace's duration");
        w.resize(2);
        assert_eq!(w.run_time(), 200);
        w.progress(50);
        w.resize(4);
        assert_eq!(w.run_time(), 75, "50 s on 2 pods did 100 of its 400 pod-seconds");
        w.resize(3);
        assert_eq!(w.run_time(), 100, "300 pod-seconds left on 3 pods");
        w.resize(7);
        assert_eq!(w.run_time(), 43, "rounded up to a whole second");
    }
}
