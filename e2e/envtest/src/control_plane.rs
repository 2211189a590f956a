//! A real control plane on loopback: etcd, kube-apiserver (TLS, token and client-certificate
//! authentication, RBAC authorization) and, on request, kube-controller-manager and
//! kube-scheduler, each a child process on free ports in a folder of its own.
//!
//! The API server can be killed and started again on the same port with etcd kept, which is
//! what an API server outage looks like to a client. Every process is killed when the
//! [`ControlPlane`] is dropped, and also when the test process dies (parent-death signal), so
//! no test leaves a server behind.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::pki::{self, Authority, CertPair};

/// What to run besides etcd and kube-apiserver.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Run kube-controller-manager: garbage collection, namespace deletion, `default`
    /// ServiceAccounts, node lifecycle (taints on unresponsive nodes, lifting `not-ready`).
    pub controller_manager: bool,
    /// Write the API server's audit log (every request at `Metadata` level) to `audit.log`.
    pub audit: bool,
    /// Further kube-apiserver flags, e.g. `--feature-gates=…` and `--runtime-config=…` to serve
    /// an alpha API.
    pub apiserver_flags: Vec<String>,
}

/// A running control plane.
pub struct ControlPlane {
    dir: PathBuf,
    assets: PathBuf,
    ca: Authority,
    admin_token: String,
    api_port: u16,
    apiserver_args: Vec<String>,
    etcd: Child,
    apiserver: Option<Child>,
    controller_manager: Option<Child>,
    kube_scheduler: Option<Child>,
    keep_dir: bool,
}

/// How a kubeconfig authenticates.
pub enum Credentials<'a> {
    /// A bearer token.
    Token(&'a str),
    /// A client certificate signed by the cluster's CA.
    Certificate(&'a CertPair),
    /// An exec credential plugin: the command (and arguments) that prints an `ExecCredential`.
    Exec(&'a [String]),
}

static SEQUENCE: AtomicU32 = AtomicU32::new(0);

impl ControlPlane {
    /// Starts etcd and kube-apiserver from `assets` (and what `options` asks for) and waits
    /// until the API server is ready.
    pub async fn start(assets: &Path, options: &Options) -> anyhow::Result<ControlPlane> {
        let dir = std::env::temp_dir().join(format!(
            "drover-envtest-{}-{}",
            std::process::id(),
            SEQUENCE.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let ca = Authority::new()?;
        std::fs::write(dir.join("ca.crt"), ca.cert_pem())?;
        let (serving_crt, serving_key) = ca.serving()?.write(&dir, "serving")?;
        let (sa_key, sa_pub) = (dir.join("sa.key"), dir.join("sa.pub"));
        let (private, public) = pki::signing_key()?;
        std::fs::write(&sa_key, private)?;
        std::fs::write(&sa_pub, public)?;
        let admin_token = random_token()?;
        std::fs::write(dir.join("tokens.csv"), format!("{admin_token},admin,admin,system:masters\n"))?;

        let [etcd_port, peer_port, api_port] = free_ports()?;
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd = spawn(
            &assets.join("etcd"),
            &[
                "--data-dir".into(),
                path_arg(&dir.join("etcd")),
                "--listen-client-urls".into(),
                etcd_url.clone(),
                "--advertise-client-urls".into(),
                etcd_url.clone(),
                "--listen-peer-urls".into(),
                peer_url.clone(),
                "--initial-advertise-peer-urls".into(),
                peer_url.clone(),
                "--initial-cluster".into(),
                format!("default={peer_url}"),
                "--unsafe-no-fsync".into(),
            ],
            &dir.join("etcd.log"),
        )?;

        let mut apiserver_args = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={api_port}"),
            format!("--tls-cert-file={}", serving_crt.display()),
            format!("--tls-private-key-file={}", serving_key.display()),
            format!("--client-ca-file={}", dir.join("ca.crt").display()),
            format!("--token-auth-file={}", dir.join("tokens.csv").display()),
            "--authorization-mode=Node,RBAC".into(),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            format!("--service-account-key-file={}", sa_pub.display()),
            format!("--service-account-signing-key-file={}", sa_key.display()),
            "--service-cluster-ip-range=10.96.0.0/24".into(),
            format!("--cert-dir={}", dir.join("certs").display()),
        ];
        if !options.controller_manager {
            // Nothing would create the `default` ServiceAccount the admission plugin insists on.
            apiserver_args.push("--disable-admission-plugins=ServiceAccount".into());
        }
        apiserver_args.extend(options.apiserver_flags.iter().cloned());
        if options.audit {
            let policy = dir.join("audit-policy.yaml");
            std::fs::write(&policy, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n")?;
            apiserver_args.push(format!("--audit-policy-file={}", policy.display()));
            apiserver_args.push(format!("--audit-log-path={}", dir.join("audit.log").display()));
            apiserver_args.push("--audit-log-format=json".into());
        }

        let mut plane = ControlPlane {
            dir,
            assets: assets.to_path_buf(),
            ca,
            admin_token,
            api_port,
            apiserver_args,
            etcd,
            apiserver: None,
            controller_manager: None,
            kube_scheduler: None,
            keep_dir: false,
        };
        plane.start_apiserver().await?;
        let admin = plane.write_kubeconfig("admin", &Credentials::Token(&plane.admin_token.clone()))?;
        if options.controller_manager {
            let kc = path_arg(&admin);
            let args = [
                format!("--kubeconfig={kc}"),
                format!("--authentication-kubeconfig={kc}"),
                format!("--authorization-kubeconfig={kc}"),
                format!("--service-account-private-key-file={}", plane.dir.join("sa.key").display()),
                format!("--root-ca-file={}", plane.dir.join("ca.crt").display()),
                "--use-service-account-credentials=false".into(),
                "--leader-elect=false".into(),
                "--controllers=*,-node-ipam-controller".into(),
                "--bind-address=127.0.0.1".into(),
                "--secure-port=0".into(),
            ];
            let child =
                spawn(&plane.assets.join("kube-controller-manager"), &args, &plane.dir.join("controller-manager.log"))?;
            plane.controller_manager = Some(child);
        }
        Ok(plane)
    }

    /// Starts kube-scheduler (admin credentials) with extra flags, e.g. client QPS and burst.
    pub fn start_kube_scheduler(&mut self, extra: &[String]) -> anyhow::Result<()> {
        let kc = path_arg(&self.dir.join("admin.kubeconfig"));
        let mut args = vec![
            format!("--kubeconfig={kc}"),
            format!("--authentication-kubeconfig={kc}"),
            format!("--authorization-kubeconfig={kc}"),
            "--leader-elect=false".into(),
            "--bind-address=127.0.0.1".into(),
            "--secure-port=0".into(),
        ];
        args.extend(extra.iter().cloned());
        self.stop_kube_scheduler();
        let child = spawn(&self.assets.join("kube-scheduler"), &args, &self.dir.join("kube-scheduler.log"))?;
        self.kube_scheduler = Some(child);
        Ok(())
    }

    /// Stops kube-scheduler if it runs.
    pub fn stop_kube_scheduler(&mut self) {
        kill(&mut self.kube_scheduler);
    }

    async fn start_apiserver(&mut self) -> anyhow::Result<()> {
        let log = self.dir.join("apiserver.log");
        let child = spawn(&self.assets.join("kube-apiserver"), &self.apiserver_args, &log)?;
        self.apiserver = Some(child);
        self.wait_ready().await
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let client = self.direct_client(&Credentials::Token(&self.admin_token.clone())).await?;
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let request = http::Request::get("/readyz").body(Vec::new())?;
            if let Ok(text) = client.request_text(request).await {
                if text.trim() == "ok" {
                    return Ok(());
                }
            }
            if let Some(status) = self.apiserver.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.keep_dir = true;
                bail!("kube-apiserver exited ({status}); see {}", self.dir.join("apiserver.log").display());
            }
            if Instant::now() > deadline {
                self.keep_dir = true;
                bail!("kube-apiserver not ready after 90 s; see {}", self.dir.join("apiserver.log").display());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Kills kube-apiserver (SIGKILL): clients see refused connections until [`Self::start_apiserver_again`].
    pub fn kill_apiserver(&mut self) {
        kill(&mut self.apiserver);
    }

    /// Starts kube-apiserver again on the same port and etcd, and waits until it is ready.
    pub async fn start_apiserver_again(&mut self) -> anyhow::Result<()> {
        self.kill_apiserver();
        self.start_apiserver().await
    }

    /// `https://127.0.0.1:PORT` of the API server.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.api_port)
    }

    /// The cluster CA.
    pub fn authority(&self) -> &Authority {
        &self.ca
    }

    /// The CA certificate's path.
    pub fn ca_path(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The folder holding the logs, certificates and kubeconfigs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The token of the `admin` user (group `system:masters`).
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The admin kubeconfig for the API server itself.
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    /// A client straight to the API server (no proxy) with `credentials`.
    pub async fn direct_client(&self, credentials: &Credentials<'_>) -> anyhow::Result<Client> {
        let text = kubeconfig_text(&self.url(), &self.ca_path(), credentials, &self.dir)?;
        client_from_text(&text).await
    }

    /// Writes `NAME.kubeconfig` for the API server with `credentials`; returns its path.
    pub fn write_kubeconfig(&self, name: &str, credentials: &Credentials<'_>) -> anyhow::Result<PathBuf> {
        let path = self.dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&path, kubeconfig_text(&self.url(), &self.ca_path(), credentials, &self.dir)?)?;
        Ok(path)
    }

    /// Keeps the folder (logs) after the control plane stops, e.g. when a test failed.
    pub fn keep_files(&mut self) {
        self.keep_dir = true;
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        kill(&mut self.kube_scheduler);
        kill(&mut self.controller_manager);
        // The API server before etcd: without etcd its shutdown waits.
        self.kill_apiserver();
        let _ = self.etcd.kill();
        let _ = self.etcd.wait();
        if self.keep_dir || std::thread::panicking() {
            eprintln!("control plane files kept in {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A kubeconfig document for `server` trusting `ca`.
pub(crate) fn kubeconfig_text(
    server: &str,
    ca: &Path,
    credentials: &Credentials<'_>,
    dir: &Path,
) -> anyhow::Result<String> {
    let user = match credentials {
        Credentials::Token(token) => serde_json::json!({"token": token}),
        Credentials::Certificate(pair) => {
            let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
            let (crt, key) = pair.write(dir, &format!("client-{n}"))?;
            serde_json::json!({"client-certificate": crt, "client-key": key})
        }
        Credentials::Exec(command) => {
            let (program, args) = command.split_first().context("an exec credential plugin needs a command")?;
            serde_json::json!({"exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": program,
                "args": args,
                "interactiveMode": "Never",
            }})
        }
    };
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "envtest", "cluster": {"server": server, "certificate-authority": ca}}],
        "users": [{"name": "user", "user": user}],
        "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": "user"}}],
        "current-context": "envtest",
    });
    // JSON is YAML: every kubeconfig reader takes it.
    Ok(serde_json::to_string_pretty(&config)?)
}

/// A client for a kubeconfig document.
pub async fn client_from_text(text: &str) -> anyhow::Result<Client> {
    let kubeconfig = Kubeconfig::from_yaml(text)?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

fn kill(child: &mut Option<Child>) {
    if let Some(mut child) = child.take() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Spawns a control-plane binary logging to `log`, killed if the test process dies.
fn spawn(program: &Path, args: &[String], log: &Path) -> anyhow::Result<Child> {
    let log_file = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut command = Command::new(program);
    command.args(args).stdin(Stdio::null()).stdout(log_file.try_clone()?).stderr(log_file);
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    command.spawn().with_context(|| format!("starting {}", program.display()))
}

/// `N` distinct ports that were free a moment ago on 127.0.0.1. Their listeners are held
/// until all are chosen: one closed right away could be handed out again at once, and etcd
/// then finds its client and peer ports the same ("address already in use").
pub fn free_ports<const N: usize>() -> anyhow::Result<[u16; N]> {
    let listeners = (0..N).map(|_| std::net::TcpListener::bind("127.0.0.1:0")).collect::<Result<Vec<_>, _>>()?;
    let mut ports = [0; N];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener.local_addr()?.port();
    }
    Ok(ports)
}

/// 32 hex characters from the system's random source.
pub fn random_token() -> anyhow::Result<String> {
    use std::io::Read as _;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn path_arg(path: &Path) -> String {
    path.display().to_string()
}
