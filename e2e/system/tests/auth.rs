//! The `drover` binaries connect to a real API server over TLS with every way a kubeconfig or a
//! pod authenticates: a bearer token, a client certificate, an exec credential plugin, and the
//! in-cluster ServiceAccount token with its CA. Each form starts `drover controllers` and
//! `drover scheduler`, which must take their leader Leases (an authenticated, authorized write).

use std::path::Path;
use std::process::{Child, Command, Stdio};

use drover_e2e::{binary, eventually};
use drover_envtest::{Credentials, Server};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::Client;
use serde_json::json;

/// A process killed on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `drover <component>` electing its leader in `namespace` as `identity`, with no kubeconfig
/// of its own (a test adds one, or none for in-cluster).
fn drover(component: &str, namespace: &str, identity: &str, home: &Path) -> Command {
    let mut cmd = Command::new(binary("drover").expect("drover is built"));
    cmd.args([component, "--metrics-addr", "127.0.0.1:0", "--lease-namespace", namespace, "--identity", identity])
        .env_remove("KUBECONFIG")
        .env("HOME", home)
        .env("RUST_LOG", "info");
    cmd
}

async fn create_namespace(client: &Client, name: &str) {
    let ns =
        Namespace { metadata: ObjectMeta { name: Some(name.into()), ..ObjectMeta::default() }, ..Namespace::default() };
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.expect("namespace created");
}

/// Grants `subject` (a JSON RBAC subject) cluster-admin.
async fn grant(client: &Client, name: &str, subject: serde_json::Value) {
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [subject],
    }))
    .expect("binding");
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding created");
}

/// Runs both components with `configure` applied and waits for both Leases in `namespace`.
async fn both_components_lead(client: &Client, server: &Server, namespace: &str, configure: impl Fn(&mut Command)) {
    create_namespace(client, namespace).await;
    let mut running = Vec::new();
    for component in ["controllers", "scheduler"] {
        let log = server.plane().dir().join(format!("{namespace}-{component}.log"));
        let mut cmd = drover(component, namespace, namespace, server.plane().dir());
        configure(&mut cmd);
        cmd.stdout(Stdio::null()).stderr(std::fs::File::create(&log).expect("log file"));
        running.push(Running(cmd.spawn().expect("drover starts")));
        let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
        let lease = format!("drover-{component}");
        eventually(60, &format!("drover {component} ({namespace}) takes its Lease; log {}", log.display()), || async {
            let holder = leases.get_opt(&lease).await.ok()??.spec?.holder_identity?;
            (holder == namespace).then_some(())
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binaries_authenticate_with_every_kubeconfig_and_pod_credential() {
    let Some(server) = Server::start().await else { return };
    let client = server.client();
    let plane = server.plane();
    drover_envtest::install_crds(&client, &drover_api::crd::all()).await.expect("CRDs installed");

    // 1. A bearer token.
    let token = plane.write_kubeconfig("token", &Credentials::Token(plane.admin_token())).expect("kubeconfig");
    both_components_lead(&client, &server, "auth-token", |c| {
        c.env("KUBECONFIG", &token);
    })
    .await;

    // 2. A client certificate of the cluster's CA, for a user RBAC knows.
    grant(
        &client,
        "drover-cert-user",
        json!({"kind": "User", "name": "drover-cert", "apiGroup": "rbac.authorization.k8s.io"}),
    )
    .await;
    let pair = plane.authority().client("drover-cert", &[]).expect("certificate");
    let cert = plane.write_kubeconfig("cert", &Credentials::Certificate(&pair)).expect("kubeconfig");
    both_components_lead(&client, &server, "auth-cert", |c| {
        c.env("KUBECONFIG", &cert);
    })
    .await;

    // 3. An exec credential plugin printing an ExecCredential.
    let script = plane.dir().join("credential.sh");
    let credential = json!({
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": plane.admin_token()},
    });
    std::fs::write(&script, format!("#!/bin/sh\necho '{credential}'\n")).expect("plugin written");
    let exec = plane
        .write_kubeconfig("exec", &Credentials::Exec(&["sh".to_string(), script.display().to_string()]))
        .expect("kubeconfig");
    both_components_lead(&client, &server, "auth-exec", |c| {
        c.env("KUBECONFIG", &exec);
    })
    .await;

    // 4. In a pod: the ServiceAccount token and CA mounted where every pod has them, and the
    // service host and port in the environment. A private mount namespace puts them there.
    create_namespace(&client, "drover-system").await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "drover-system");
    let account = ServiceAccount {
        metadata: ObjectMeta { name: Some("drover".into()), ..ObjectMeta::default() },
        ..ServiceAccount::default()
    };
    accounts.create(&PostParams::default(), &account).await.expect("service account");
    grant(&client, "drover-sa", json!({"kind": "ServiceAccount", "name": "drover", "namespace": "drover-system"}))
        .await;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(vec!["https://kubernetes.default.svc".into()]),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let issued: TokenRequest =
        accounts.create_subresource("token", "drover", &PostParams::default(), &request).await.expect("token issued");
    let secrets = plane.dir().join("serviceaccount");
    std::fs::create_dir_all(&secrets).expect("folder");
    std::fs::write(secrets.join("token"), issued.status.and_then(|s| s.token).expect("token")).expect("token file");
    std::fs::copy(plane.ca_path(), secrets.join("ca.crt")).expect("ca file");
    std::fs::write(secrets.join("namespace"), "drover-system").expect("namespace file");
    let port = plane.url().rsplit(':').next().expect("port").to_string();
    let mount = "mount -t tmpfs tmpfs /run && mkdir -p /run/secrets/kubernetes.io \
                 && cp -r \"$SA_DIR\" /run/secrets/kubernetes.io/serviceaccount && exec \"$@\"";
    both_components_lead(&client, &server, "auth-incluster", |c| {
        let program = c.get_program().to_owned();
        let args: Vec<_> = c.get_args().map(|a| a.to_owned()).collect();
        let mut wrapped = Command::new("unshare");
        wrapped.args(["--mount", "--propagation", "private", "sh", "-c", mount, "sh"]).arg(program).args(args);
        wrapped
            .env("SA_DIR", &secrets)
            .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
            .env("KUBERNETES_SERVICE_PORT", &port);
        for (key, value) in c.get_envs() {
            match value {
                Some(v) => wrapped.env(key, v),
                None => wrapped.env_remove(key),
            };
        }
        *c = wrapped;
    })
    .await;
}
