//! Which origin certificates robotsgate trusts: the system's roots, plus any the operator adds.
//!
//! Every HTTPS request leaves robotsgate as a new TLS connection, verified against these
//! roots; a failure is a 502 naming the reason, never a silent fallback to no
//! verification. Pingora's connectors read roots either from the platform or from one
//! `ca_file` that *replaces* them, so adding roots means handing Pingora one file with
//! both: [`UpstreamTrust`] writes it (system roots + `tls.upstream_extra_roots`) to a
//! private temporary file, which only has to exist while the connectors are built
//! (they load it once) and is deleted when this value is dropped.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

/// The roots origin certificates are verified against: the system's, plus the extra
/// ones configured, as one file Pingora's connectors can load.
pub struct UpstreamTrust {
    /// The system's roots and the extra ones, as one file (none: no extra roots configured).
    bundle: Option<tempfile::NamedTempFile>,
}

impl UpstreamTrust {
    /// System roots only unless `extra` names PEM files; each must hold at least one valid
    /// root certificate.
    pub fn load(extra: &[PathBuf]) -> anyhow::Result<UpstreamTrust> {
        if extra.is_empty() {
            return Ok(UpstreamTrust { bundle: None });
        }
        let mut roots: Vec<CertificateDer<'static>> = pingora::tls::load_native_certs()
            .unwrap_or_else(|e| {
                log::warn!("cannot read the system's root certificates ({e}); only tls.upstream_extra_roots are trusted");
                Vec::new()
            });
        let mut extra_roots = 0;
        for (i, path) in extra.iter().enumerate() {
            let key = format!("tls.upstream_extra_roots[{i}]");
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("{key}: cannot read {}", path.display()))?;
            let pems = pem::parse_many(&text)
                .map_err(|e| anyhow::anyhow!("{key}: {} is not PEM: {e}", path.display()))?;
            let mut found = 0;
            for block in pems.into_iter().filter(|p| p.tag() == "CERTIFICATE") {
                let der = CertificateDer::from(block.into_contents());
                // Checked here so a bad root is a start-up error naming the file.
                RootCertStore::empty().add(der.clone()).map_err(|e| {
                    anyhow::anyhow!("{key}: {} holds an unusable root: {e}", path.display())
                })?;
                roots.push(der);
                found += 1;
            }
            if found == 0 {
                anyhow::bail!("{key}: {} holds no CERTIFICATE", path.display());
            }
            extra_roots += found;
        }
        let mut file = tempfile::Builder::new()
            .prefix("robotsgate-roots-")
            .suffix(".pem")
            .tempfile()
            .context("create the upstream root bundle")?;
        for der in &roots {
            let block = pem::Pem::new("CERTIFICATE", der.as_ref().to_vec());
            file.write_all(pem::encode(&block).as_bytes())
                .context("write the upstream root bundle")?;
        }
        file.flush().context("write the upstream root bundle")?;
        log::info!("origin certificates: {extra_roots} extra root(s) trusted besides the system's");
        Ok(UpstreamTrust { bundle: Some(file) })
    }

    /// The file to give Pingora as `ca_file`, or `None` for the platform's roots.
    pub fn ca_file(&self) -> Option<String> {
        self.bundle
            .as_ref()
            .map(|f| f.path().to_string_lossy().into_owned())
    }
}
