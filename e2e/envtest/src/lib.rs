//! Tests against a real Kubernetes control plane, the way controller-runtime's envtest does it:
//! real `etcd` and `kube-apiserver` binaries (and `kube-controller-manager`, `kube-scheduler`
//! on request) from the folder named by `KUBEBUILDER_ASSETS`, or from the project's
//! `../shared/envtest/` unpacked once. The API server speaks TLS only, authenticates tokens
//! and client certificates and authorizes with RBAC, as every real cluster does.
//!
//! [`Server`] puts a [`FaultProxy`] in front of it, so a test can make the API fail in the
//! ways a real server only does under load or during upgrades (409, 429, 500, dropped
//! watches, latency), and kill and restart the API server itself with etcd kept.
//!
//! Without the binaries [`Server::start`] prints that the test is skipped and returns `None`;
//! with `DROVER_REQUIRE_ENVTEST` set (CI) it fails instead.

pub mod assets;
pub mod control_plane;
pub mod pki;
pub mod proxy;
pub mod tools;
pub mod wait;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::Client;

pub use control_plane::{ControlPlane, Credentials, Options};
pub use proxy::{FaultProxy, Faults};
pub use wait::{eventually, eventually_result};

/// A real control plane with a fault proxy in front: what a test talks to.
pub struct Server {
    plane: ControlPlane,
    proxy: FaultProxy,
    client: Client,
    kubeconfig: PathBuf,
}

impl Server {
    /// etcd and kube-apiserver only: the API, RBAC and admission, no controllers.
    pub async fn start() -> Option<Server> {
        Self::start_with(&Options::default()).await
    }

    /// A control plane with what `options` adds; `None` (after saying so) when the binaries
    /// are missing and may be.
    ///
    /// # Panics
    /// When the control plane fails to start, or the binaries are missing in CI.
    pub async fn start_with(options: &Options) -> Option<Server> {
        let assets = assets::require()?;
        let result = async {
            let plane = ControlPlane::start(&assets, options).await?;
            let proxy = FaultProxy::start(&plane.url(), plane.authority()).await?;
            let admin = Credentials::Token(plane.admin_token());
            let text = control_plane::kubeconfig_text(&proxy.url(), &plane.ca_path(), &admin, plane.dir())?;
            let kubeconfig = plane.dir().join("proxy-admin.kubeconfig");
            std::fs::write(&kubeconfig, &text)?;
            let client = control_plane::client_from_text(&text).await?;
            anyhow::Ok(Server { plane, proxy, client, kubeconfig })
        };
        Some(result.await.unwrap_or_else(|e| panic!("the test control plane did not start: {e:#}")))
    }

    /// An admin client through the fault proxy.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// An admin kubeconfig through the fault proxy (for processes under test).
    pub fn kubeconfig(&self) -> PathBuf {
        self.kubeconfig.clone()
    }

    /// A kubeconfig through the fault proxy that authenticates with `token`.
    pub fn kubeconfig_for_token(&self, name: &str, token: &str) -> anyhow::Result<PathBuf> {
        let path = self.plane.dir().join(format!("proxy-{name}.kubeconfig"));
        let text = control_plane::kubeconfig_text(
            &self.proxy.url(),
            &self.plane.ca_path(),
            &Credentials::Token(token),
            self.plane.dir(),
        )?;
        std::fs::write(&path, text)?;
        Ok(path)
    }

    /// The faults the proxy injects.
    pub fn faults(&self) -> Faults {
        self.proxy.faults()
    }

    /// The control plane itself (direct clients, kubeconfigs, certificates, logs).
    pub fn plane(&self) -> &ControlPlane {
        &self.plane
    }

    /// The control plane, e.g. to start kube-scheduler.
    pub fn plane_mut(&mut self) -> &mut ControlPlane {
        &mut self.plane
    }

    /// An API server outage: kube-apiserver is killed and started again on the same port
    /// with the same etcd; returns once it is ready.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.plane.start_apiserver_again().await
    }

    /// Stops every process (as dropping does).
    pub async fn stop(self) {
        drop(self);
    }
}

/// Whether the API server lists the CRD's objects (its storage can answer for a moment after
/// the CRD is established: clients that start then see 404 or 429 and back off).
async fn served(client: &Client, crd: &CustomResourceDefinition) -> bool {
    let Some(version) = crd.spec.versions.iter().find(|v| v.served) else { return false };
    let gvk = GroupVersionKind::gvk(&crd.spec.group, &version.name, &crd.spec.names.kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural);
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    api.list(&ListParams::default().limit(1)).await.is_ok()
}

/// Creates (or updates, server-side) `crds` and waits until the API server serves them.
pub async fn install_crds(client: &Client, crds: &[CustomResourceDefinition]) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply("drover-envtest").force();
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &params, &Patch::Apply(crd)).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        loop {
            let current = api.get(&name).await?;
            let established = current
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Established" && c.status == "True"));
            if established && served(client, &current).await {
                break;
            }
            if Instant::now() > deadline {
                bail!("CRD {name} was not established within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}
