//! The operator's certificate authority: the key that lets robotsgate read HTTPS.
//!
//! A crawler that sends `CONNECT host:443` expects a certificate for `host`. robotsgate
//! answers with a leaf certificate it mints on the spot (`intercept.rs`), signed by this
//! CA, which the operator has made every crawler host trust. Nothing else can see the
//! paths inside the tunnel, and robots.txt is about paths.
//!
//! The CA is created once (`robotsgate ca init`): an ECDSA P-256 key (fast to sign
//! with, small handshakes), path length 0 (it signs leaves, never other CAs), five years by
//! default. The key file is written with mode 0600 and never overwritten. The CA is
//! loaded when robotsgate starts and checked then (key matches, is a CA, not expired), so
//! a bad file is a start-up error naming the file rather than a handshake failure later.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};
use time::{Duration, OffsetDateTime};

/// A loaded operator CA, ready to sign leaves.
pub struct OperatorCa {
    /// Signs leaf certificates with the CA's key.
    pub(crate) issuer: Issuer<'static, KeyPair>,
    /// When the CA itself expires: leaves never outlive it.
    pub not_after: OffsetDateTime,
    /// The CA's subject, for logs.
    pub subject: String,
}

impl std::fmt::Debug for OperatorCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorCa")
            .field("subject", &self.subject)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

/// A fresh random serial number (RFC 5280: positive, at most 20 octets).
pub(crate) fn random_serial() -> anyhow::Result<SerialNumber> {
    let mut bytes = [0u8; 16];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut bytes)
        .map_err(|_| anyhow::anyhow!("no secure random source"))?;
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01; // never a leading zero octet
    Ok(SerialNumber::from_slice(&bytes))
}

/// Writes a new CA certificate and key. Refuses to overwrite either file.
pub fn init(cert_path: &Path, key_path: &Path, days: u32, name: &str) -> anyhow::Result<()> {
    if days == 0 {
        bail!("--days must be at least 1");
    }
    for path in [cert_path, key_path] {
        if path.exists() {
            bail!(
                "{} exists; robotsgate never overwrites a CA (remove it first if you mean to replace it, and re-distribute the new certificate)",
                path.display()
            );
        }
    }
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).context("generate CA key")?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    dn.push(DnType::OrganizationName, "robotsgate");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(i64::from(days));
    params.serial_number = Some(random_serial()?);
    let cert = params.self_signed(&key).context("self-sign CA")?;

    // Key first, 0600 from creation (never briefly world-readable), never overwriting.
    write_new(key_path, key.serialize_pem().as_bytes(), 0o600)?;
    if let Err(e) = write_new(cert_path, cert.pem().as_bytes(), 0o644) {
        let _ = std::fs::remove_file(key_path);
        return Err(e);
    }
    Ok(())
}

/// Writes a certificate for `name` signed by `ca`, usable to serve and to connect as
/// (the fleet's member certificates: `robotsgate fleet-cert`), its subject's
/// organization `organization` (a fleet member's name), and its key (mode 0600).
/// Refuses to overwrite either file.
pub fn issue(
    ca: &OperatorCa,
    cert_path: &Path,
    key_path: &Path,
    days: u32,
    name: &str,
    organization: Option<&str>,
) -> anyhow::Result<()> {
    if days == 0 {
        bail!("--days must be at least 1");
    }
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).context("generate key")?;
    let mut params = CertificateParams::new(vec![name.to_string()]).context("certificate name")?;
    params.distinguished_name.push(DnType::CommonName, name);
    if let Some(organization) = organization {
        params
            .distinguished_name
            .push(DnType::OrganizationName, organization);
    }
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::hours(1);
    params.not_after = (now + Duration::days(i64::from(days))).min(ca.not_after);
    params.serial_number = Some(random_serial()?);
    let cert = params.signed_by(&key, &ca.issuer).context("sign")?;
    write_new(key_path, key.serialize_pem().as_bytes(), 0o600)?;
    if let Err(e) = write_new(cert_path, cert.pem().as_bytes(), 0o644) {
        let _ = std::fs::remove_file(key_path);
        return Err(e);
    }
    Ok(())
}

/// Creates `path` with `bytes` and `mode`, never overwriting.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    let mut file = options
        .open(path)
        .with_context(|| format!("create {}", path.display()))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("write {}", path.display()))
}

impl OperatorCa {
    /// Loads and checks a CA: the certificate is a CA, is valid now, and the key is its key.
    pub fn load(cert_path: &Path, key_path: &Path) -> anyhow::Result<OperatorCa> {
        let cert_pem = std::fs::read_to_string(cert_path).with_context(|| {
            format!(
                "tls.ca_cert: cannot read {} (create a CA with `robotsgate ca init --cert {} --key {}`)",
                cert_path.display(),
                cert_path.display(),
                key_path.display()
            )
        })?;
        let key_pem = std::fs::read_to_string(key_path)
            .with_context(|| format!("tls.ca_key: cannot read {}", key_path.display()))?;
        warn_if_key_readable_by_others(key_path);
        let key = KeyPair::from_pem(&key_pem).map_err(|e| {
            anyhow::anyhow!(
                "tls.ca_key: {} is not a PEM private key: {e}",
                key_path.display()
            )
        })?;
        let der = pem_certificate(&cert_pem).ok_or_else(|| {
            anyhow::anyhow!(
                "tls.ca_cert: {} holds no PEM CERTIFICATE",
                cert_path.display()
            )
        })?;
        let (_, x509) = x509_parser::parse_x509_certificate(&der).map_err(|e| {
            anyhow::anyhow!(
                "tls.ca_cert: {} is not an X.509 certificate: {e}",
                cert_path.display()
            )
        })?;
        let is_ca = x509
            .basic_constraints()
            .ok()
            .flatten()
            .is_some_and(|bc| bc.value.ca);
        if !is_ca {
            bail!(
                "tls.ca_cert: {} is not a CA certificate (basicConstraints CA:TRUE missing)",
                cert_path.display()
            );
        }
        if x509.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
            bail!(
                "tls.ca_key: {} is not the key of {}",
                key_path.display(),
                cert_path.display()
            );
        }
        let validity = x509.validity();
        let not_after = validity.not_after.to_datetime();
        let now = OffsetDateTime::now_utc();
        if validity.not_before.to_datetime() > now || not_after <= now {
            bail!(
                "tls.ca_cert: {} is not valid now (valid {} to {})",
                cert_path.display(),
                validity.not_before,
                validity.not_after
            );
        }
        if not_after - now < Duration::days(30) {
            log::warn!(
                "tls.ca_cert: {} expires on {}; create a new CA and distribute it",
                cert_path.display(),
                validity.not_after
            );
        }
        let subject = x509.subject().to_string();
        let issuer = Issuer::from_ca_cert_der(&der.clone().into(), key)
            .map_err(|e| anyhow::anyhow!("tls.ca_cert: {}: {e}", cert_path.display()))?;
        Ok(OperatorCa {
            issuer,
            not_after,
            subject,
        })
    }
}

/// The DER of the first `CERTIFICATE` block in a PEM text.
fn pem_certificate(text: &str) -> Option<Vec<u8>> {
    pem::parse_many(text)
        .ok()?
        .into_iter()
        .find(|p| p.tag() == "CERTIFICATE")
        .map(|p| p.into_contents())
}

/// Logs a warning when the CA key's file can be read by group or others.
fn warn_if_key_readable_by_others(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.permissions().mode() & 0o077 != 0 {
                log::warn!(
                    "tls.ca_key: {} is readable by group or others (mode {:o}); chmod 600 it",
                    path.display(),
                    meta.permissions().mode() & 0o777
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_then_load_and_refuse_to_overwrite() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cert = dir.path().join("ca.pem");
        let key = dir.path().join("ca.key");
        init(&cert, &key, 365, "test CA").expect("init");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&key).expect("key").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let ca = OperatorCa::load(&cert, &key).expect("load");
        assert!(ca.subject.contains("test CA"), "{}", ca.subject);
        let days = (ca.not_after - OffsetDateTime::now_utc()).whole_days();
        assert!((363..=365).contains(&days), "{days}");
        let err = init(&cert, &key, 365, "again").expect_err("exists");
        assert!(err.to_string().contains("never overwrites"), "{err}");
    }

    #[test]
    fn load_names_the_file_and_the_problem() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (c1, k1) = (dir.path().join("1.pem"), dir.path().join("1.key"));
        let (c2, k2) = (dir.path().join("2.pem"), dir.path().join("2.key"));
        init(&c1, &k1, 30, "one").expect("init");
        init(&c2, &k2, 30, "two").expect("init");
        let err = OperatorCa::load(&c1, &k2)
            .expect_err("wrong key")
            .to_string();
        assert!(
            err.contains("tls.ca_key") && err.contains("is not the key"),
            "{err}"
        );
        let err = OperatorCa::load(&k1, &k1).expect_err("no cert").to_string();
        assert!(
            err.contains("tls.ca_cert") && err.contains("no PEM CERTIFICATE"),
            "{err}"
        );
        let missing = dir.path().join("missing.pem");
        let err = OperatorCa::load(&missing, &k1)
            .expect_err("missing")
            .to_string();
        assert!(
            err.contains("cannot read") && err.contains("missing.pem"),
            "{err}"
        );

        // A leaf is not a CA.
        let leaf_key = KeyPair::generate().expect("key");
        let leaf = CertificateParams::new(vec!["a.example".to_string()])
            .expect("params")
            .self_signed(&leaf_key)
            .expect("leaf");
        let (lc, lk) = (dir.path().join("leaf.pem"), dir.path().join("leaf.key"));
        std::fs::write(&lc, leaf.pem()).expect("write");
        std::fs::write(&lk, leaf_key.serialize_pem()).expect("write");
        let err = OperatorCa::load(&lc, &lk)
            .expect_err("not a CA")
            .to_string();
        assert!(err.contains("not a CA certificate"), "{err}");
    }
}
