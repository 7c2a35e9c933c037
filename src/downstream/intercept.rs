//! TLS interception: a certificate for whatever host a crawler CONNECTs to.
//!
//! After `CONNECT host:443` is answered, the crawler starts a TLS handshake expecting
//! `host`'s certificate. [`Interceptor`] answers it with a leaf certificate minted for the
//! CONNECT host (IP literals become IP SANs), signed by the operator CA ([`OperatorCa`]);
//! a ClientHello whose SNI names another host is refused.
//!
//! Costs, and how they are kept off the request path:
//! * Minting is one ECDSA P-256 signature (≈0.1–1 ms). Leaves are cached per name in a
//!   bounded LRU (`tls.leaf_cache_size`), so an origin costs one mint per
//!   `leaf_validity_days / 2` (a leaf is re-minted when half its life has passed, so no
//!   client ever sees one about to expire).
//! * All leaves share one key pair generated at start: the CA key is what clients trust,
//!   so per-leaf keys would add key generation to every mint and no protection.
//! * Every leaf gets a random serial: clients reject two certificates from one issuer
//!   with the same serial.
//! * The rustls `ServerConfig` is built once; a connection gets a clone (a few `Arc`
//!   copies) carrying its CONNECT host, sharing the session cache for resumption.

use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use lru::LruCache;
use pingora::listeners::tls::Acceptor;
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

use crate::config::{Http2, TlsConfig};
use crate::downstream::ca::{random_serial, OperatorCa};

/// The ALPN protocols intercepted TLS offers with `tls.http2`, in order of preference.
pub fn protocols(http2: Http2) -> &'static [&'static [u8]] {
    match http2 {
        Http2::Auto => &[b"h2", b"http/1.1"],
        Http2::Off => &[b"http/1.1"],
    }
}

/// Mints and caches the leaf certificates of intercepted tunnels.
pub struct Interceptor {
    /// The operator CA the leaves are signed by.
    ca: OperatorCa,
    /// The one key pair every leaf certifies (minting signs, it does not generate keys).
    leaf_key: KeyPair,
    /// `leaf_key` as rustls signs with it.
    signing_key: Arc<dyn rustls::sign::SigningKey>,
    /// How long a minted leaf is valid.
    validity: Duration,
    /// Leaves minted, by host name, with when each was minted (LRU-bounded).
    leaves: Mutex<LruCache<String, (Arc<CertifiedKey>, Instant)>>,
    /// The TLS settings every intercepted handshake starts from.
    base: ServerConfig,
}

impl std::fmt::Debug for Interceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interceptor")
            .field("ca", &self.ca)
            .finish_non_exhaustive()
    }
}

impl Interceptor {
    /// An interceptor signing with `ca`, with one leaf key for all its leaves.
    pub fn new(ca: OperatorCa, config: &TlsConfig) -> anyhow::Result<Interceptor> {
        crate::telemetry::metrics::TLS_CA_EXPIRY.set(ca.not_after.unix_timestamp());
        let leaf_key =
            KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).context("generate leaf key")?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let der = rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der())
            .map_err(|e| anyhow::anyhow!("leaf key: {e}"))?;
        let signing_key = provider
            .key_provider
            .load_private_key(der)
            .context("load leaf key")?;
        let mut base = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS12, &rustls::version::TLS13])
            .context("TLS versions")?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(NoCertificate));
        // The protocols inside the tunnel, h2 first: a client offering both gets it.
        base.alpn_protocols = protocols(config.http2).iter().map(|p| p.to_vec()).collect();
        let capacity = NonZeroUsize::new(config.leaf_cache_size).unwrap_or(NonZeroUsize::MIN);
        Ok(Interceptor {
            ca,
            leaf_key,
            signing_key,
            validity: Duration::from_secs(u64::from(config.leaf_validity_days) * 86_400),
            leaves: Mutex::new(LruCache::new(capacity)),
            base,
        })
    }

    /// The TLS acceptor for one tunnel to `connect_host`.
    pub fn acceptor(self: &Arc<Self>, connect_host: String) -> Acceptor {
        Acceptor::from_server_config(self.server_config(connect_host))
    }

    /// The rustls configuration behind [`Interceptor::acceptor`].
    pub fn server_config(self: &Arc<Self>, connect_host: String) -> Arc<ServerConfig> {
        let mut config = self.base.clone();
        config.cert_resolver = Arc::new(LeafResolver {
            interceptor: self.clone(),
            connect_host,
        });
        Arc::new(config)
    }

    /// The leaf for `name`: cached, or minted now.
    pub fn leaf_for(&self, name: &str) -> anyhow::Result<Arc<CertifiedKey>> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        {
            let mut leaves = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((leaf, minted)) = leaves.get(&name) {
                if minted.elapsed() < self.validity / 2 {
                    crate::telemetry::metrics::TLS_LEAF_CACHE_HITS.inc();
                    return Ok(leaf.clone());
                }
            }
        }
        let leaf = Arc::new(self.mint(&name)?);
        crate::telemetry::metrics::TLS_LEAF_MINTS.inc();
        self.leaves
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .put(name, (leaf.clone(), Instant::now()));
        Ok(leaf)
    }

    /// Mints a leaf certificate for `name`.
    fn mint(&self, name: &str) -> anyhow::Result<CertifiedKey> {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.subject_alt_names = vec![match name.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(
                name.to_string()
                    .try_into()
                    .with_context(|| format!("`{name}` is not a DNS name"))?,
            ),
        }];
        params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::hours(1);
        let validity = time::Duration::try_from(self.validity).unwrap_or(time::Duration::DAY);
        // A CA past its end would sign leaves no client accepts: refuse, loudly; and say
        // so ahead of time, at every mint in its last 30 days.
        if now >= self.ca.not_after {
            log::error!(
                "TLS interception: the operator CA expired on {}; no leaf is minted (create a new CA with `robotsgate ca init` and distribute it)",
                self.ca.not_after
            );
            anyhow::bail!("the operator CA expired on {}", self.ca.not_after);
        }
        if self.ca.not_after - now < time::Duration::days(30) {
            log::warn!(
                "TLS interception: the operator CA expires on {}; create a new one and distribute it",
                self.ca.not_after
            );
        }
        params.not_after = (now + validity).min(self.ca.not_after);
        params.serial_number = Some(random_serial()?);
        let cert = params
            .signed_by(&self.leaf_key, &self.ca.issuer)
            .with_context(|| format!("sign a leaf for {name}"))?;
        Ok(CertifiedKey::new(
            vec![cert.der().clone()],
            self.signing_key.clone(),
        ))
    }
}

/// Resolves the certificate for one tunnel: always the CONNECT host's. A client whose SNI
/// names another host fails the handshake (counted): a leaf for it would be for a tunnel
/// that goes elsewhere, and minting for any SNI lets one client churn the leaf cache.
#[derive(Debug)]
struct LeafResolver {
    /// Mints the leaves.
    interceptor: Arc<Interceptor>,
    /// The CONNECT's host, used when the ClientHello names none.
    connect_host: String,
}

impl ResolvesServerCert for LeafResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = self.connect_host.as_str();
        if let Some(sni) = hello.server_name() {
            if !sni.trim_end_matches('.').eq_ignore_ascii_case(name) {
                crate::telemetry::metrics::TLS_SNI_MISMATCHES.inc();
                log::warn!("TLS interception: SNI `{sni}` in a tunnel to `{name}`: refused");
                return None;
            }
        }
        match self.interceptor.leaf_for(name) {
            Ok(leaf) => Some(leaf),
            Err(e) => {
                log::warn!("TLS interception: no certificate for `{name}`: {e:#}");
                None
            }
        }
    }
}

/// The base config's placeholder; every connection replaces it with a [`LeafResolver`].
#[derive(Debug)]
struct NoCertificate;

impl ResolvesServerCert for NoCertificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interceptor(cache: usize) -> (tempfile::TempDir, Interceptor) {
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key) = (dir.path().join("ca.pem"), dir.path().join("ca.key"));
        crate::downstream::ca::init(&cert, &key, 30, "test CA").expect("init");
        let ca = OperatorCa::load(&cert, &key).expect("load");
        let config = TlsConfig {
            leaf_cache_size: cache,
            ..TlsConfig::default()
        };
        (dir, Interceptor::new(ca, &config).expect("interceptor"))
    }

    fn parse(leaf: &CertifiedKey) -> Vec<u8> {
        leaf.cert[0].as_ref().to_vec()
    }

    #[test]
    fn leaves_name_the_host_are_cached_and_bounded() {
        let (_dir, i) = interceptor(2);
        let a = i.leaf_for("A.Example.").expect("mint");
        let der = parse(&a);
        let (_, x509) = x509_parser::parse_x509_certificate(&der).expect("x509");
        let sans = x509
            .subject_alternative_name()
            .expect("ext")
            .expect("san")
            .value
            .general_names
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>();
        assert_eq!(sans, ["DNSName(a.example)"]);
        assert!(x509.issuer().to_string().contains("test CA"));
        let days = (x509.validity().not_after.to_datetime() - time::OffsetDateTime::now_utc())
            .whole_days();
        assert!((6..=7).contains(&days), "{days}");
        // Same name (any spelling): the cached leaf.
        assert!(Arc::ptr_eq(&a, &i.leaf_for("a.example").expect("hit")));
        // Bounded: a third name evicts the least recently used.
        let b = i.leaf_for("b.example").expect("mint");
        i.leaf_for("c.example").expect("mint");
        assert!(!Arc::ptr_eq(&a, &i.leaf_for("a.example").expect("re-mint")));
        assert_ne!(parse(&b), parse(&i.leaf_for("a.example").expect("x")));
    }

    #[test]
    fn ip_literals_become_ip_sans_and_serials_differ() {
        let (_dir, i) = interceptor(10);
        let leaf = i.leaf_for("127.0.0.1").expect("mint");
        let der = parse(&leaf);
        let (_, x509) = x509_parser::parse_x509_certificate(&der).expect("x509");
        let san = x509.subject_alternative_name().expect("ext").expect("san");
        assert_eq!(
            san.value.general_names[0].to_string(),
            "IPAddress(7f:00:00:01)"
        );
        let other = i.leaf_for("::1").expect("mint");
        let der2 = parse(&other);
        let (_, x2) = x509_parser::parse_x509_certificate(&der2).expect("x509");
        assert_ne!(x509.serial, x2.serial);
        // Names reach here as SNI or parsed CONNECT hosts (ASCII); anything else is refused.
        assert!(i.leaf_for("m\u{fc}ller.example").is_err());
    }
}
