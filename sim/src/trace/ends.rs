//! The ends of a replay's running jobs, earliest first, for its virtual clock to jump to.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// End times of running jobs, earliest first. Evicting a job cancels its end; a cancelled
/// entry is skipped when reached.
pub struct Ends {
    heap: BinaryHeap<Reverse<(i64, usize)>>,
    end_of: Vec<Option<i64>>,
}

impl Ends {
    /// No job running, of `jobs` trace jobs.
    pub fn new(jobs: usize) -> Ends {
        Ends { heap: BinaryHeap::new(), end_of: vec![None; jobs] }
    }

    /// `job` runs until `end`.
    pub fn start(&mut self, job: usize, end: i64) {
        self.end_of[job] = Some(end);
        self.heap.push(Reverse((end, job)));
    }

    /// `job` stopped before its end (evicted or resized).
    pub fn cancel(&mut self, job: usize) {
        self.end_of[job] = None;
    }

    /// The next end still due.
    pub fn next_end(&mut self) -> Option<i64> {
        while let Some(&Reverse((t, j))) = self.heap.peek() {
            if self.end_of[j] == Some(t) {
                return Some(t);
            }
            self.heap.pop();
        }
        None
    }

    /// Takes the next job ending at or before `now`, with its end.
    pub fn pop_due(&mut self, now: i64) -> Option<(usize, i64)> {
        let t = self.next_end().filter(|&t| t <= now)?;
        let Reverse((_, j)) = self.heap.pop().expect("next_end() saw it");
        self.end_of[j] = None;
        Some((j, t))
    }
}
