//! The test cluster's certificates: one CA that signs the API server's serving certificate,
//! the proxy's, and client certificates for users and groups (the API server trusts it as its
//! client CA), plus the service-account signing key. ECDSA P-256 throughout, made with rcgen,
//! so no `openssl` is needed.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// A PEM certificate and its PEM private key.
#[derive(Clone, Debug)]
pub struct CertPair {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// Its private key, PEM (PKCS#8).
    pub key_pem: String,
}

impl CertPair {
    /// Writes `NAME.crt` and `NAME.key` into `dir`; returns their paths.
    pub fn write(&self, dir: &Path, name: &str) -> anyhow::Result<(PathBuf, PathBuf)> {
        let (crt, key) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
        std::fs::write(&crt, &self.cert_pem).with_context(|| format!("writing {}", crt.display()))?;
        std::fs::write(&key, &self.key_pem).with_context(|| format!("writing {}", key.display()))?;
        Ok((crt, key))
    }
}

/// The cluster's certificate authority.
pub struct Authority {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Authority {
    /// A new self-signed CA.
    pub fn new() -> anyhow::Result<Authority> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, "drover-envtest-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        Ok(Authority { issuer })
    }

    /// The CA certificate, PEM: what clients trust.
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// A serving certificate for loopback (`127.0.0.1`, `localhost`) and the in-cluster names.
    pub fn serving(&self) -> anyhow::Result<CertPair> {
        let names = ["127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"];
        let mut params = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
        params.distinguished_name.push(DnType::CommonName, "kube-apiserver");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A client certificate: the API server reads the user from the common name and the
    /// groups from the organizations.
    pub fn client(&self, user: &str, groups: &[&str]) -> anyhow::Result<CertPair> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, user);
        for group in groups {
            params.distinguished_name.push(DnType::OrganizationName, *group);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, mut params: CertificateParams) -> anyhow::Result<CertPair> {
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(CertPair { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }
}

/// A key pair for signing service-account tokens: (private PEM, public PEM).
pub fn signing_key() -> anyhow::Result<(String, String)> {
    let key = KeyPair::generate()?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}
