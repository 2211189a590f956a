//! The README's playground, run as written: the fenced `sh` block of its "A local playground"
//! section is read from README.md (so the test follows the README, and fails when a line of
//! it stops working) and run by `sh -e` from the repository's root, with `cargo run ... --bin X
//! --` standing for the built binary X and `/tmp/kc` for a file of the test's own. Then every
//! sample reaches the state its comment promises (`ends \`Completed\``, `stays \`Running\``),
//! the block's last line lists the sample Jobs, `kubectl get dq` and `kubectl get djob` show
//! their columns as people read them, and everything the block started is stopped.
//!
//! Skipped (SKIPPED printed) without the control-plane binaries or kubectl, unless
//! `DROVER_REQUIRE_ENVTEST` / `DROVER_REQUIRE_KUBECTL` make that a failure.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The fenced `sh` block under the README's "A local playground" heading.
fn playground_block() -> String {
    let readme = std::fs::read_to_string(repository().join("README.md")).expect("README.md readable");
    let (_, section) = readme.split_once("## A local playground").expect("README.md has \"## A local playground\"");
    let section = section.split("\n## ").next().unwrap_or_default();
    let (_, block) = section.split_once("```sh\n").expect("the playground section has a ```sh block");
    let (block, _) = block.split_once("```").expect("the ```sh block is closed");
    block.to_string()
}

/// The block with the built binaries for `cargo run` and `kubeconfig` for `/tmp/kc`.
fn as_run_here(block: &str, kubeconfig: &Path) -> String {
    let playground = env!("CARGO_BIN_EXE_drover-playground");
    let drover = drover_e2e::binary("drover").expect("the drover binary is built");
    let script = block
        .replace("cargo run --release -p drover-e2e --bin drover-playground --", playground)
        .replace("cargo run --release --bin drover --", &drover.display().to_string())
        .replace("/tmp/kc", &kubeconfig.display().to_string());
    assert!(!script.contains("cargo "), "a `cargo` command of the README's block has no built binary here:\n{script}");
    script
}

/// The processes the block left running (its own process group), stopped on drop: SIGTERM,
/// then SIGKILL for what is still there after 30 s.
struct Started {
    group: u32,
}

impl Started {
    fn signal(&self, signal: &str) -> bool {
        let target = format!("-{}", self.group);
        Command::new("kill").args([signal, "--", &target]).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        self.signal("-TERM");
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.signal("-0") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
        }
        self.signal("-KILL");
    }
}

fn kubectl(kubeconfig: &Path, home: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env("HOME", home)
        .output()
        .expect("kubectl runs");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Polls `check` every second for `secs` seconds until it gives a value.
fn within<T>(secs: u64, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "not within {secs} s: {what}");
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The rows of a `kubectl get` table by column header. Headers may hold a space (`QUEUE
/// STATE`); kubectl separates columns by at least three spaces and starts each cell where
/// its header starts.
fn table(text: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    let mut starts = Vec::new();
    let mut at = 0;
    for name in header.split("   ").filter(|n| !n.trim().is_empty()) {
        let start = at + header[at..].find(name.trim()).expect("a header name");
        starts.push((name.trim().to_string(), start));
        at = start + name.trim().len();
    }
    lines
        .map(|line| {
            let cell = |i: usize| {
                let from = starts[i].1.min(line.len());
                let to = starts.get(i + 1).map_or(line.len(), |s| s.1.min(line.len()));
                line[from..to].trim().to_string()
            };
            (0..starts.len()).map(|i| (starts[i].0.clone(), cell(i))).collect()
        })
        .collect()
}

/// The sample objects of `kind` with the state their file's comment promises: the word in
/// backquotes after "ends" or "stays" in a comment line of the playground.
fn promised(kind: &str) -> Vec<(String, String, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(repository().join("config/samples")).expect("config/samples readable") {
        let text = std::fs::read_to_string(entry.expect("an entry").path()).expect("a sample");
        let object: Value = serde_yaml::from_str(text.split("\n---").next().unwrap_or_default()).unwrap_or_default();
        if object["kind"] != kind {
            continue;
        }
        let comment: String = text
            .lines()
            .take_while(|l| l.starts_with('#'))
            .map(|l| l.trim_start_matches('#'))
            .collect::<Vec<_>>()
            .join(" ");
        let state = ["ends `", "stays `"]
            .iter()
            .find_map(|lead| comment.split_once(lead).and_then(|(_, rest)| rest.split_once('`')).map(|(s, _)| s))
            .unwrap_or_else(|| {
                panic!("the comment of sample {} says what state it reaches", object["metadata"]["name"])
            });
        let meta = &object["metadata"];
        let name = |field: &str| meta[field].as_str().unwrap_or_default().to_string();
        found.push((name("namespace"), name("name"), state.to_string()));
    }
    found
}

/// A Job no node can run (16 GPUs in one pod, nodes of 8): it waits, with a reason.
const TOO_BIG: &str = r#"{"apiVersion": "batch.drover.dev/v1alpha1", "kind": "Job",
  "metadata": {"name": "too-big", "namespace": "nlp-team"},
  "spec": {"queue": "nlp.a100", "tasks": [{"name": "worker", "replicas": 1, "template": {"spec": {
    "nodeSelector": {"drover.dev/node-pool": "a100"},
    "containers": [{"name": "main", "image": "trainer", "resources": {
      "requests": {"nvidia.com/gpu": "16"}, "limits": {"nvidia.com/gpu": "16"}}}]}}}]}}"#;

#[test]
fn the_readme_playground_brings_every_sample_to_its_promised_state() {
    let jobs = promised("Job");
    let pods = promised("Pod");
    assert!(!jobs.is_empty() && !pods.is_empty(), "the samples have Jobs and a Pod");
    let Some(assets) = drover_envtest::assets::require() else { return };
    if !drover_envtest::tools::kubectl_available() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("drover-playground-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a folder for the test");
    let kubeconfig = dir.join("kc");
    let script = as_run_here(&playground_block(), &kubeconfig);
    let (out, err) = (dir.join("block.out"), dir.join("block.err"));
    let mut shell = Command::new("sh")
        .args(["-e", "-c", &script])
        .current_dir(repository())
        .env(drover_envtest::assets::ASSETS_VAR, &assets)
        .env("HOME", &dir)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("output file"))
        .stderr(std::fs::File::create(&err).expect("error file"))
        .process_group(0)
        .spawn()
        .expect("sh runs");
    let started = Started { group: shell.id() };
    let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
    let logs = || format!("the block's output:\n{}\nits errors:\n{}", read(&out), read(&err));
    let what = format!("the README's playground block ends (its output in {} and {})", out.display(), err.display());
    let status = within(180, &what, || shell.try_wait().expect("sh is there"));
    let logs = logs();
    assert!(status.success(), "the README's playground block failed:\n{script}\n{logs}");
    let listed = read(&out);
    for (namespace, name, _) in &jobs {
        let row = format!("job.batch.drover.dev/{name} ");
        let listed_here = listed.lines().any(|l| l.starts_with(namespace.as_str()) && l.contains(&row));
        assert!(listed_here, "the block's last line lists {namespace}/{name}:\n{logs}");
    }

    let get = |args: &[&str]| kubectl(&kubeconfig, &dir, args);
    // While the DDP gang runs, its queue shows it in GPUs first, memory in Gi, no JSON.
    let vision = within(90, "vision.a100 shows the running resnet-ddp gang", || {
        let rows = table(&get(&["get", "dq", "vision.a100"]).ok()?);
        rows.into_iter().next().filter(|r| r["ALLOCATED/DESERVED/LIMIT"].starts_with("nvidia.com/gpu 16/16/24"))
    });
    assert_eq!((vision["STATE"].as_str(), vision["QUEUE STATE"].as_str()), ("Open", "InQuota"), "{vision:?}");
    let figures = &vision["ALLOCATED/DESERVED/LIMIT"];
    assert!(figures.contains("memory 256Gi/0/-") && !figures.contains('{'), "{figures}");
    let research = table(&get(&["get", "dq", "research"]).expect("kubectl get dq research"));
    assert_eq!(research[0]["ALLOCATED/DESERVED/LIMIT"], "nvidia.com/gpu 0/8/16", "{research:?}");
    let ddp = table(&get(&["get", "djob", "-n", "vision-team", "resnet-ddp"]).expect("kubectl get djob"));
    assert_eq!(ddp[0]["MIN"], "4", "no minAvailable: the gang is every replica: {ddp:?}");

    // A Job that cannot run says why in `kubectl get djob`, as its PodGroup does.
    let manifest = dir.join("too-big.json");
    std::fs::write(&manifest, TOO_BIG).expect("manifest written");
    get(&["apply", "-f", &manifest.display().to_string()]).expect("the too-big Job is created");
    let jsonpath = "-o=jsonpath={.status.conditions[?(@.type==\"Unschedulable\")].message}";
    let group_reason = within(60, "the too-big PodGroup says why it waits", || {
        get(&["get", "pg", "-n", "nlp-team", "too-big", jsonpath]).ok().filter(|r| !r.is_empty())
    });
    within(30, "kubectl get djob too-big shows its PodGroup's reason", || {
        let rows = table(&get(&["get", "djob", "-n", "nlp-team", "too-big"]).ok()?);
        rows.into_iter().next().filter(|r| r["REASON"] == group_reason && r["MIN"] == "1")
    });

    for (namespace, name, state) in &jobs {
        within(120, &format!("Job {namespace}/{name} reaches {state}, as its sample says"), || {
            let job: Value =
                serde_json::from_str(&get(&["get", "djob", "-n", namespace, name, "-o", "json"]).ok()?).ok()?;
            (job["status"]["state"] == state.as_str()).then_some(())
        });
    }
    for (namespace, name, state) in &pods {
        within(60, &format!("Pod {namespace}/{name} is {state}, as its sample says"), || {
            let pod: Value =
                serde_json::from_str(&get(&["get", "pod", "-n", namespace, name, "-o", "json"]).ok()?).ok()?;
            (pod["status"]["phase"] == state.as_str()).then_some(())
        });
    }

    drop(started);
    assert!(!kubeconfig.exists(), "the playground removes its kubeconfig when it stops");
    let _ = std::fs::remove_dir_all(&dir);
}
