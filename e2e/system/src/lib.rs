//! Harness for end-to-end tests: starts the real `drover-apiserver` (with fake GPU nodes),
//! `drover controllers` and `drover scheduler` processes from the workspace's target folder,
//! installs Drover's CRDs, and hands out a kube-rs client. Processes are killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// A running cluster: the emulator and Drover's processes.
pub struct Cluster {
    dir: PathBuf,
    kubeconfig: PathBuf,
    processes: Vec<Child>,
    /// A client for the emulator.
    pub client: Client,
}

/// The folder holding the workspace's built binaries (the test binary lives in `deps/` below it).
fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary has a path");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf()
}

fn binary(name: &str) -> anyhow::Result<PathBuf> {
    let path = bin_dir().join(name);
    if !path.exists() {
        bail!("{} is not built: run `cargo build --release` (the workspace test run builds it)", path.display());
    }
    Ok(path)
}

impl Cluster {
    /// Starts the emulator with `nodes` fake nodes of 8 GPUs, installs the CRDs, then starts
    /// `drover controllers` and `drover scheduler`.
    pub async fn start(name: &str, nodes: u32) -> anyhow::Result<Cluster> {
        let dir = std::env::temp_dir().join(format!("drover-e2e-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let kubeconfig = dir.join("kubeconfig");
        let apiserver = Command::new(binary("drover-apiserver")?)
            .args(["--listen", "127.0.0.1:0", "--kubeconfig"])
            .arg(&kubeconfig)
            .args([
                "--nodes",
                &nodes.to_string(),
                "--node-allocatable",
                "cpu=64,memory=512Gi,nvidia.com/gpu=8,pods=110",
            ])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("apiserver.log"))?)
            .spawn()
            .context("starting drover-apiserver")?;
        let mut cluster = Cluster { dir, kubeconfig, processes: vec![apiserver], client: placeholder_client()? };
        cluster.client = cluster.wait_for_kubeconfig().await?;
        cluster.install_crds().await?;
        cluster.spawn_drover("controllers", &[])?;
        cluster.spawn_drover("scheduler", &["--period", "0.2"])?;
        Ok(cluster)
    }

    async fn wait_for_kubeconfig(&self) -> anyhow::Result<Client> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.kubeconfig.exists() {
            if Instant::now() > deadline {
                bail!("drover-apiserver wrote no kubeconfig; see {}", self.dir.join("apiserver.log").display());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)?;
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        Ok(Client::try_from(config)?)
    }

    async fn install_crds(&self) -> anyhow::Result<()> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        for crd in drover_api::crd::all() {
            api.create(&PostParams::default(), &crd).await.context("creating a CRD")?;
        }
        Ok(())
    }

    /// Starts `drover <command>` against the emulator, logging to `<command>.log`.
    pub fn spawn_drover(&mut self, command: &str, extra: &[&str]) -> anyhow::Result<()> {
        let child = Command::new(binary("drover")?)
            .arg(command)
            .args(["--metrics-addr", "127.0.0.1:0", "--lease-namespace", "default"])
            .args(extra)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.join(format!("{command}-{}.log", self.processes.len())))?)
            .spawn()
            .with_context(|| format!("starting drover {command}"))?;
        self.processes.push(child);
        Ok(())
    }

    /// Where the processes' logs are, for failure messages.
    pub fn logs(&self) -> &Path {
        &self.dir
    }
}

/// A client that is replaced as soon as the kubeconfig exists.
fn placeholder_client() -> anyhow::Result<Client> {
    let config = Config::new("http://127.0.0.1:1".parse()?);
    Ok(Client::try_from(config)?)
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.processes.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Polls `check` until it returns `Some`, failing after `secs` seconds with `what`.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
