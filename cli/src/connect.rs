//! How the user commands reach a cluster (the kubeconfig, as kubectl reads it) and how their
//! failures become exit codes and messages that name the object.

use std::path::PathBuf;
use std::process::ExitCode;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Cluster options every user command takes, with kubectl's meaning.
#[derive(clap::Args, Debug, Clone)]
pub struct KubeArgs {
    /// Path to the kubeconfig file (default: `$KUBECONFIG`, else `~/.kube/config`, else the
    /// in-cluster ServiceAccount).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, global = true)]
    pub context: Option<String>,
}

/// Why a user command failed; each kind has its own exit code.
#[derive(Debug)]
pub enum Failure {
    /// The command line or a file was wrong (exit 2).
    BadInput(String),
    /// The named object does not exist (exit 3).
    NotFound(String),
    /// The cluster could not be reached, or refused the request (exit 4).
    Cluster(String),
}

impl Failure {
    /// Prints the failure and returns its exit code.
    pub fn report(self) -> ExitCode {
        let (code, message) = match self {
            Failure::BadInput(m) => (2, m),
            Failure::NotFound(m) => (3, m),
            Failure::Cluster(m) => (4, m),
        };
        eprintln!("error: {message}");
        ExitCode::from(code)
    }

    /// Classifies an API error about `object` (e.g. `queue "vision"`).
    pub fn from_api(object: &str, error: kube::Error) -> Failure {
        match error {
            kube::Error::Api(status) if status.is_not_found() => Failure::NotFound(format!("{object} not found")),
            kube::Error::Api(status) if status.code == 403 => {
                Failure::Cluster(format!("{object}: access refused by the API server: {}", status.message))
            }
            kube::Error::Api(status) => Failure::Cluster(format!(
                "{object}: the API server answered {} {}: {}",
                status.code, status.reason, status.message
            )),
            other => Failure::Cluster(format!("{object}: {other}")),
        }
    }
}

/// A client for the cluster `args` name.
pub async fn client(args: &KubeArgs) -> Result<Client, Failure> {
    let options = KubeConfigOptions { context: args.context.clone(), ..KubeConfigOptions::default() };
    let config = match (&args.kubeconfig, &args.context) {
        (Some(path), _) => {
            let file = Kubeconfig::read_from(path)
                .map_err(|e| Failure::BadInput(format!("kubeconfig {}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|e| Failure::BadInput(format!("kubeconfig {}: {e}", path.display())))?
        }
        (None, Some(context)) => Config::from_kubeconfig(&options)
            .await
            .map_err(|e| Failure::BadInput(format!("kubeconfig context {context:?}: {e}")))?,
        (None, None) => {
            Config::infer().await.map_err(|e| Failure::Cluster(format!("no cluster configuration: {e}")))?
        }
    };
    Client::try_from(config).map_err(|e| Failure::Cluster(format!("connecting to the cluster: {e}")))
}
