//! TLS for tests: a test CA for origins, a client trusting a PEM, robotsgate's operator
//! CA.

use super::*;

/// A certificate authority made in the test, for origins' certificates.
pub struct TestCa {
    pub cert_pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let key = rcgen::KeyPair::generate().expect("ca key");
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("self-sign");
        TestCa {
            cert_pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A certificate for `names` and its key, both PEM: for origins outside this process.
    pub fn leaf_pem(&self, names: &[&str]) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("leaf key");
        let params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("params");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        (cert.pem(), key.serialize_pem())
    }

    /// A server config with a certificate for `names` (DNS names or IP literals).
    pub fn server_config(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        let key = rcgen::KeyPair::generate().expect("leaf key");
        let params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("params");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        let key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("key der");
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)
        .expect("server config");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

/// A TLS client config trusting only the certificates in `pem` (a CA file).
pub fn client_config_trusting(pem_text: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for block in pem::parse_many(pem_text).expect("pem") {
        roots
            .add(rustls::pki_types::CertificateDer::from(
                block.into_contents(),
            ))
            .expect("root");
    }
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

/// An operator CA made by `robotsgate ca init` in `dir`: (certificate, key) paths.
pub fn operator_ca(dir: &std::path::Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("operator-ca.pem"), dir.join("operator-ca.key"));
    run_ok(
        Command::new(env!("CARGO_BIN_EXE_robotsgate"))
            .args(["ca", "init", "--cert"])
            .arg(&cert)
            .arg("--key")
            .arg(&key),
    );
    (cert, key)
}
