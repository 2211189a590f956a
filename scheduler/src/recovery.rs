//! Bind intents judged by the core: pods a previous leader (or an earlier cycle) decided to
//! bind but did not finish binding are checked again by the rules of a new decision, one gang
//! after another on one session, so that what one gang completes counts against the capacity
//! and queue bounds the next is checked with. The cluster edge reads the intents and writes
//! what they become; it opens no session and judges no binding itself.

use crate::config::SchedulerConfig;
use crate::framework::Framework;
use crate::plugin::ShareBound;
use crate::plugins;
use crate::session::{PodState, Session, Statement};
use crate::snapshot::{NodeId, PodId, Snapshot};

/// One session with the configured plugins, in which intents' bindings are taken or refused.
pub struct IntentJudge<'s> {
    ssn: Session<'s>,
    fw: Framework,
}

impl<'s> IntentJudge<'s> {
    /// A judge of `snap` with the plugins `config` enables.
    pub fn open(snap: &'s Snapshot, config: &SchedulerConfig) -> IntentJudge<'s> {
        let mut ssn = Session::open(snap);
        let mut fw = Framework::new(plugins::build(config));
        fw.open(&mut ssn);
        IntentJudge { ssn, fw }
    }

    /// Takes the binding of pod `p` to node `n` into the gang's statement `st` if it may be
    /// made now by the same rules as a new decision: a pending member of its gang, every
    /// predicate (cordon, taints, selectors, affinity, node pool), the node's idle capacity and
    /// every queue bound up the tree (limits, the deserved quota of non-preemptible work).
    /// Otherwise says why not.
    pub fn take(&mut self, st: &mut Statement, p: PodId, n: NodeId) -> Result<(), String> {
        let ssn = &self.ssn;
        let snap = ssn.snap;
        let pod = &snap.pods[p];
        let node = &snap.nodes[n].name;
        if ssn.pod_state[p] != PodState::Pending {
            return Err("it is not pending".into());
        }
        self.fw.node_filter(snap, pod.job, pod.task, n).map_err(|e| format!("node {node}: {e}"))?;
        if !ssn.fits_idle(n, ssn.requests(p), None) {
            return Err(format!("it no longer fits node {node}"));
        }
        self.fw.allocatable(ssn, pod.job, ssn.requests(p), ShareBound::Idle).map_err(|why| why.to_string())?;
        self.ssn.allocate(st, p, n);
        Ok(())
    }

    /// Keeps what a gang took: its bindings count for the gangs judged after it.
    pub fn keep(&mut self, st: Statement) {
        self.ssn.commit(st);
    }

    /// Gives back what a gang took (it is rolled back).
    pub fn give_back(&mut self, st: Statement) {
        self.ssn.discard(st);
    }
}
