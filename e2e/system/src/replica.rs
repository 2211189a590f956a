//! Drover processes a test starts and kills itself, to exercise leader election: each has an
//! explicit identity, so the test knows which one holds the lease.

use std::process::Child;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;

use crate::Cluster;

/// A `drover` process started by the test; killed (SIGKILL) on drop.
pub struct Replica {
    child: Child,
    /// Its `--identity`, as its lease says when it leads.
    pub identity: String,
}

impl Replica {
    /// Kills it with SIGKILL (no lease release, as in a crash) and waits for it to end.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill9();
    }
}

impl Cluster {
    /// Starts `drover <command>` with the harness's flags, `--identity identity` and `extra`,
    /// logging to `<command>-<identity>.log`.
    pub fn spawn_replica(&self, command: &str, identity: &str, extra: &[&str]) -> Replica {
        let log = self.logs().join(format!("{command}-{identity}.log"));
        let child = self
            .drover_command(command, &log)
            .expect("drover is built")
            .args(["--identity", identity])
            .args(extra)
            .spawn()
            .expect("drover starts");
        Replica { child, identity: identity.to_string() }
    }
}

/// The holder of the Lease `name` in `default` (where the harness puts Drover's leases), if any.
pub async fn lease_holder(client: &kube::Client, name: &str) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let lease = leases.get_opt(name).await.ok()??;
    lease.spec?.holder_identity.filter(|h| !h.is_empty())
}
