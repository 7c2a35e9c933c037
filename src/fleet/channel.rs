//! The channel between instances: how a request is handed to its origin's owner.
//!
//! **Authentication.** Mutual TLS from a fleet CA: every member has a certificate for
//! the name [`PEER_NAME`] signed by the fleet's CA (`fleet.peer_ca`, `fleet.peer_cert`,
//! `fleet.peer_key`; `robotsgate fleet-cert` makes one). The peer listener
//! (`fleet.peer_listen`) completes a handshake only with a client that presents such a
//! certificate, and a member connects to another only when the other presents one: no
//! client can use the channel, and no client's own headers can claim to come from a
//! peer (they are stripped at the front door; only the peer listener reads them).
//!
//! **What travels.** The request as the client sent it (its request target, headers and
//! body, streamed), plus one header, [`PEER_HEADER`], carrying what the receiving member
//! knows of it that the request does not say: the sending member, the client's address, the proxy user (its
//! name, authenticated by the sender), the tunnel's origin, the redirected
//! connection's destination and the client's protocol ([`PeerContext`]). The owner then serves it exactly as if its client had come to
//! it: judged once, signed once, paced once; its answer (status, headers including
//! `X-Robots-*`, body streamed) goes back unchanged.
//!
//! Costs: one TLS connection per pair of members, pooled (Pingora's upstream pool); one
//! header of a few hundred octets per request handed over.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use pingora::protocols::tls::SslDigest;
use pingora::utils::tls::{CertKey, WrappedX509};
use serde::{Deserialize, Serialize};

use crate::telemetry::metrics;

/// The name every member's certificate is for, and the SNI members connect with.
pub const PEER_NAME: &str = "robotsgate-fleet";

/// The header a request handed over carries its [`PeerContext`] in.
pub const PEER_HEADER: &str = "robotsgate-peer";

/// How many times a request or a tunnel handed over is routed once more, its owner
/// having given its key up or never received it: twice, for a member can meet a leaving
/// owner again once (another request of its own learnt it anew before hearing that it
/// leaves).
const MAX_REROUTES: u8 = 2;

/// How many times a request (or a tunnel) was routed once more: the count that decides
/// whether it may be again, whichever path it takes (the proxy, the front's relay, a
/// tunnel), applied by `handover`'s one rule (`HandOver::route_again`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reroutes(u8);

impl Reroutes {
    /// The next routing, when one more is allowed.
    pub fn again(self) -> Option<Reroutes> {
        (self.0 < MAX_REROUTES).then_some(Reroutes(self.0 + 1))
    }
}

/// Whether an owner's answer (its status and `X-Robots-Decision`) says it no longer
/// serves the key — it released it, handed it to another member, or is leaving — and so
/// refused the request before working on it: `503`, `fleet-unavailable`.
pub fn owner_gave_up(status: u16, decision: Option<&[u8]>) -> bool {
    status == 503 && decision.is_some_and(|d| d.starts_with(b"fleet-unavailable"))
}

/// Why the peer channel's certificates cannot be used.
#[derive(Debug)]
pub struct ChannelError {
    /// Which file, and what is wrong with it.
    message: String,
}

impl std::fmt::Display for ChannelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ChannelError {}

/// Why no member answered at an address ([`PeerTls::answering_member`]).
#[derive(Debug)]
pub enum NotAnswered {
    /// No peer channel answers there (refused, or not a member's TLS): what failed.
    NoPeerChannel(SocketAddr, String),
    /// Nothing answered within the time given.
    Silent(SocketAddr, Duration),
    /// A certificate from the fleet CA that names no member.
    NoMember(SocketAddr),
}

impl std::fmt::Display for NotAnswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotAnswered::NoPeerChannel(addr, e) => {
                write!(f, "no member's peer channel answers at {addr}: {e}")
            }
            NotAnswered::Silent(addr, within) => {
                write!(f, "nothing answered at {addr} in {within:?}")
            }
            NotAnswered::NoMember(addr) => {
                write!(f, "the certificate served at {addr} names no member")
            }
        }
    }
}

impl std::error::Error for NotAnswered {}

/// The fleet's TLS: the peer listener's server configuration (client certificates from
/// the fleet CA required), and what a member presents and trusts when it connects.
pub struct PeerTls {
    /// The peer listener's configuration.
    server: Arc<rustls::ServerConfig>,
    /// This member's certificate and key, presented to the owner.
    client_cert: Arc<CertKey>,
    /// The fleet CA, the only root the owner's certificate is checked against.
    ca: Arc<[WrappedX509]>,
    /// The member this instance's certificate names.
    member: String,
}

impl PeerTls {
    /// Loads the fleet CA (`ca`), this member's certificate chain (`cert`) and key
    /// (`key`), PEM files; an error names the file.
    pub fn load(ca: &Path, cert: &Path, key: &Path) -> Result<PeerTls, ChannelError> {
        let ca_ders = certificates(ca)?;
        let chain = certificates(cert)?;
        let member = chain
            .first()
            .and_then(|leaf| member_named(leaf))
            .ok_or_else(|| {
                error(
                    cert,
                    "it names no member (make one with robotsgate fleet-cert --member NAME)",
                )
            })?;
        let key_der = private_key(key)?;
        // When this member's certificate, and the first of the fleet CAs it trusts,
        // expire: after that, it cannot hand a request over, nor be handed one.
        let leaf_expiry = chain.first().and_then(|leaf| expiry(leaf));
        let ca_expiry = ca_ders.iter().filter_map(|der| expiry(der)).min();
        let (Some(leaf_expiry), Some(ca_expiry)) = (leaf_expiry, ca_expiry) else {
            return Err(error(cert, "its validity cannot be read"));
        };
        metrics::FLEET_PEER_CERT_EXPIRY.set(leaf_expiry);
        metrics::FLEET_PEER_CA_EXPIRY.set(ca_expiry);
        let mut roots = rustls::RootCertStore::empty();
        for der in &ca_ders {
            roots.add(der.clone().into()).map_err(|e| error(ca, e))?;
        }
        // AES-128-GCM first, and this end's order chosen over the client's: both ends are
        // members, and its records take 10 AES rounds a block against AES-256-GCM's 14
        // (rustls' first choice), on every request handed over.
        let mut provider = rustls::crypto::ring::default_provider();
        provider
            .cipher_suites
            .sort_by_key(|s| s.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
        let provider = Arc::new(provider);
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .map_err(|e| error(ca, e))?;
        let verifier = Arc::new(OneMember(verifier));
        let chain_der: Vec<rustls::pki_types::CertificateDer<'static>> =
            chain.iter().map(|d| d.clone().into()).collect();
        let mut server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| error(cert, e))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain_der, key_der.clone_key())
            .map_err(|e| error(cert, e))?;
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        server.ignore_client_order = true;
        let ca_list: Vec<WrappedX509> = ca_ders
            .into_iter()
            .map(|der| WrappedX509::new(der, pingora::utils::tls::parse_x509))
            .collect();
        Ok(PeerTls {
            server: Arc::new(server),
            client_cert: Arc::new(CertKey::new(chain, key_der.secret_der().to_vec())),
            ca: ca_list.into(),
            member,
        })
    }

    /// The member this instance's certificate names.
    pub fn member(&self) -> &str {
        &self.member
    }

    /// Which member answers at `addr`, connecting as a member hands a request over (its
    /// certificate from the fleet CA, and the member it names); an error says what
    /// answered instead (nothing, or not a member) within `within`.
    pub async fn answering_member(
        &self,
        addr: SocketAddr,
        within: Duration,
    ) -> Result<String, NotAnswered> {
        let connector = pingora::connectors::TransportConnector::new(None);
        let peer = self.peer(addr);
        let stream = match tokio::time::timeout(within, connector.new_stream(&peer)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(NotAnswered::NoPeerChannel(addr, e.to_string())),
            Err(_) => return Err(NotAnswered::Silent(addr, within)),
        };
        let digest = stream.get_ssl_digest();
        member_in(digest.as_deref())
            .map(str::to_string)
            .ok_or(NotAnswered::NoMember(addr))
    }

    /// The peer listener's TLS configuration.
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        self.server.clone()
    }

    /// The Pingora peer for the member listening at `addr`: TLS for [`PEER_NAME`],
    /// checked against the fleet CA alone, this member's certificate presented.
    pub fn peer(&self, addr: SocketAddr) -> pingora::upstreams::peer::HttpPeer {
        let mut peer = pingora::upstreams::peer::HttpPeer::new(addr, true, PEER_NAME.to_string());
        peer.client_cert_key = Some(self.client_cert.clone());
        peer.options.ca = Some(self.ca.clone());
        peer.options.alpn = pingora::protocols::ALPN::H1;
        peer
    }
}

/// Is `name` usable as a member's name: 1 to 64 letters, digits, `.`, `_` or `-`?
pub fn member_name_valid(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// When the certificate `der` expires (Unix time), if it can be read.
fn expiry(der: &[u8]) -> Option<i64> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(cert.validity().not_after.timestamp())
}

/// The member a certificate (DER) names: its subject's one organization, when it is a
/// valid member name (`robotsgate fleet-cert --member NAME` writes it there). A subject
/// with more than one organization names none: Pingora's digest, which [`member_in`]
/// reads, joins them all, so it would read another name than this.
pub fn member_named(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let mut organizations = cert.subject().iter_organization();
    let (Some(organization), None) = (organizations.next(), organizations.next()) else {
        return None;
    };
    let name = organization.as_str().ok()?;
    member_name_valid(name).then(|| name.to_string())
}

/// The peer listener's check of a client's certificate: the fleet CA's (WebPKI), and
/// then [`member_named`]: a certificate that names no member, or more than one
/// organization, fails the handshake, so the name [`member_in`] reads afterwards is the
/// one [`member_named`] reads.
#[derive(Debug)]
struct OneMember(Arc<dyn rustls::server::danger::ClientCertVerifier>);

impl rustls::server::danger::ClientCertVerifier for OneMember {
    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        intermediates: &[rustls::pki_types::CertificateDer<'_>],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        let verified = self.0.verify_client_cert(end_entity, intermediates, now)?;
        if member_named(end_entity).is_none() {
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ));
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The member a connection's certificate names (`digest`, what its handshake checked
/// against the fleet CA): its subject's organization, when that is a valid member name.
pub fn member_in(digest: Option<&SslDigest>) -> Option<&str> {
    digest
        .and_then(|d| d.organization.as_deref())
        .filter(|name| member_name_valid(name))
}

/// Whether a connection opened to an owner was answered by that owner: the
/// certificate it presented (`answered`, as the handshake checked it against the fleet
/// CA) names the member of `owner` (an instance id). Any other key from the fleet CA —
/// a member that left, or one stolen and used between the two — is sent nothing: removing
/// a member revokes its key as an owner too. Counted, and logged without the
/// certificate's contents beyond the member it names.
pub fn answered_by(owner: &str, answered: Option<&SslDigest>) -> bool {
    let named = member_in(answered);
    if named == Some(member_of(owner)) {
        return true;
    }
    crate::telemetry::metrics::record_impostor();
    log::warn!(
        "fleet: the peer address of owner {owner} answered with a certificate naming {}: nothing sent, the owner looked up again",
        named.unwrap_or("no member")
    );
    false
}

/// The member name an instance id starts with (`NAME/start.pid`): the name its
/// certificate gives it.
pub fn member_of(instance: &str) -> &str {
    instance.split_once('/').map_or(instance, |(name, _)| name)
}

/// The certificates of a PEM file, each parsed once here (so a broken one is this
/// file's error, never a panic later), in DER.
fn certificates(path: &Path) -> Result<Vec<Vec<u8>>, ChannelError> {
    let text = std::fs::read(path).map_err(|e| error(path, e))?;
    let ders: Vec<Vec<u8>> = pem::parse_many(&text)
        .map_err(|e| error(path, e))?
        .into_iter()
        .filter(|p| p.tag() == "CERTIFICATE")
        .map(|p| p.into_contents())
        .collect();
    if ders.is_empty() {
        return Err(error(path, "no certificate in it"));
    }
    for der in &ders {
        x509_parser::parse_x509_certificate(der).map_err(|e| error(path, e))?;
    }
    Ok(ders)
}

/// The private key of a PEM file.
fn private_key(path: &Path) -> Result<rustls::pki_types::PrivateKeyDer<'static>, ChannelError> {
    let text = std::fs::read(path).map_err(|e| error(path, e))?;
    let block = pem::parse_many(&text)
        .map_err(|e| error(path, e))?
        .into_iter()
        .find(|p| p.tag().ends_with("PRIVATE KEY"))
        .ok_or_else(|| error(path, "no private key in it"))?;
    rustls::pki_types::PrivateKeyDer::try_from(block.into_contents()).map_err(|e| error(path, e))
}

/// A channel error naming the file at `path`.
fn error(path: &Path, why: impl std::fmt::Display) -> ChannelError {
    ChannelError {
        message: format!("{}: {why}", path.display()),
    }
}

/// What the receiving member knows of a request handed over that the request itself
/// does not say. Written without its empty fields (a request's usual context is its
/// client's address alone): the header is encoded on every request the relay hands over
/// and read on every one the owner serves.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerContext {
    /// The client's address.
    #[serde(rename = "c", default, skip_serializing_if = "Option::is_none")]
    pub client: Option<IpAddr>,
    /// The proxy user's name, authenticated by the sender (the owner takes its tokens
    /// and purposes from its own credentials file).
    #[serde(rename = "u", default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Inside an intercepted tunnel: its origin (`https://host:port`).
    #[serde(rename = "t", default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<String>,
    /// On a redirected connection: where it was going.
    #[serde(rename = "d", default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<SocketAddr>,
    /// The client spoke HTTP/2.
    #[serde(rename = "h2", default, skip_serializing_if = "std::ops::Not::not")]
    pub http2: bool,
}

impl PeerContext {
    /// The header value: JSON, base64url.
    pub fn encode(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    /// Reads a header value; `None` for anything unreadable (the request is refused).
    pub fn decode(value: &[u8]) -> Option<PeerContext> {
        if value.len() > 8192 {
            return None;
        }
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(value)
            .ok()?;
        serde_json::from_slice(&json).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_fields_are_left_out_and_unknown_ones_ignored() {
        let client_only = PeerContext {
            client: Some("10.0.0.7".parse().expect("ip")),
            ..PeerContext::default()
        };
        let encoded = client_only.encode();
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&encoded)
            .expect("base64url");
        assert_eq!(json, br#"{"c":"10.0.0.7"}"#);
        assert_eq!(
            PeerContext::decode(encoded.as_bytes()),
            Some(client_only.clone())
        );
        // Written with every field (as a member of an earlier version writes it): the same.
        let full = br#"{"c":"10.0.0.7","u":null,"t":null,"d":null,"h2":false}"#;
        let full = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(full);
        assert_eq!(
            PeerContext::decode(full.as_bytes()),
            Some(client_only.clone())
        );
        // With a field this version does not know (as a later version may write it):
        // the field is ignored (docs/upgrades.md).
        let later = br#"{"c":"10.0.0.7","zz":{"any":[1,2]}}"#;
        let later = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(later);
        assert_eq!(PeerContext::decode(later.as_bytes()), Some(client_only));
    }

    #[test]
    fn an_owner_is_answered_only_by_a_certificate_naming_its_member() {
        let naming =
            |org: Option<&str>| SslDigest::new("", "", org.map(str::to_string), None, Vec::new());
        assert!(answered_by("a/1.2", Some(&naming(Some("a")))));
        for other in [Some("b"), Some("a/1.2"), Some("a."), Some(""), None] {
            assert!(!answered_by("a/1.2", Some(&naming(other))), "{other:?}");
        }
        assert!(!answered_by("a/1.2", None), "no certificate");
    }

    #[test]
    fn a_context_round_trips_and_garbage_is_refused() {
        let context = PeerContext {
            client: Some("10.0.0.7".parse().expect("ip")),
            user: Some("ann".into()),
            tunnel: Some("https://example.com:443".into()),
            destination: None,
            http2: true,
        };
        let encoded = context.encode();
        assert_eq!(PeerContext::decode(encoded.as_bytes()), Some(context));
        for bad in [&b"!!"[..], b"e30", b"", &[b'A'; 9000]] {
            let decoded = PeerContext::decode(bad);
            assert!(
                decoded.is_none() || decoded == Some(PeerContext::default()),
                "{bad:?}"
            );
        }
    }
}
