//! TLS interception cost: a server-side handshake with a cached leaf (the baseline) vs
//! one that must mint the leaf first, in memory (no sockets, no scheduler noise).
//!
//! Each iteration runs a complete TLS 1.3 handshake between a rustls client (trusting the
//! operator CA, no resumption) and the interceptor's server config, moving the bytes
//! through buffers. "cached" names the same host every time; "minted" a new one each
//! time, so the leaf is signed during the handshake. Ends with the ratio.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use criterion::Criterion;
use robotsgate::config::TlsConfig;
use robotsgate::downstream::ca::OperatorCa;
use robotsgate::downstream::intercept::Interceptor;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConnection};

struct Fixture {
    _dir: tempfile::TempDir,
    interceptor: Arc<Interceptor>,
    client: Arc<ClientConfig>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key) = (dir.path().join("ca.pem"), dir.path().join("ca.key"));
    robotsgate::downstream::ca::init(&cert, &key, 30, "bench CA").expect("ca init");
    let ca = OperatorCa::load(&cert, &key).expect("load");
    let config = TlsConfig {
        leaf_cache_size: 1_000_000,
        ..TlsConfig::default()
    };
    let interceptor = Arc::new(Interceptor::new(ca, &config).expect("interceptor"));
    let mut roots = RootCertStore::empty();
    let pem_text = std::fs::read_to_string(&cert).expect("read ca");
    for block in pem::parse_many(pem_text).expect("pem") {
        roots
            .add(rustls::pki_types::CertificateDer::from(
                block.into_contents(),
            ))
            .expect("root");
    }
    let mut client =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
    client.resumption = rustls::client::Resumption::disabled();
    Fixture {
        _dir: dir,
        interceptor,
        client: Arc::new(client),
    }
}

/// One full handshake for `host`, in memory.
fn handshake(f: &Fixture, host: &str) {
    let name = ServerName::try_from(host.to_string()).expect("name");
    let mut client = ClientConnection::new(f.client.clone(), name).expect("client");
    let mut server =
        ServerConnection::new(f.interceptor.server_config(host.to_string())).expect("server");
    let mut buf = Vec::with_capacity(8192);
    while client.is_handshaking() || server.is_handshaking() {
        buf.clear();
        while client.wants_write() {
            client.write_tls(&mut buf).expect("client write");
        }
        if !buf.is_empty() {
            server.read_tls(&mut buf.as_slice()).expect("server read");
            server.process_new_packets().expect("server process");
        }
        buf.clear();
        while server.wants_write() {
            server.write_tls(&mut buf).expect("server write");
        }
        if !buf.is_empty() {
            client.read_tls(&mut buf.as_slice()).expect("client read");
            client
                .process_new_packets()
                .expect("client verifies the leaf");
        }
    }
    black_box((&client, &server));
}

fn median_micros(mut run: impl FnMut()) -> f64 {
    let mut samples: Vec<f64> = (0..400)
        .map(|_| {
            let started = Instant::now();
            run();
            started.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() {
    let f = fixture();
    let mut c = Criterion::default().configure_from_args();
    handshake(&f, "cached.example");
    c.bench_function("handshake, cached leaf (baseline)", |b| {
        b.iter(|| handshake(&f, "cached.example"))
    });
    let mut n = 0u64;
    c.bench_function("handshake, minted leaf", |b| {
        b.iter(|| {
            n += 1;
            handshake(&f, &format!("h{n}.minted.example"));
        })
    });
    c.bench_function("mint only", |b| {
        b.iter(|| {
            n += 1;
            f.interceptor
                .leaf_for(&format!("m{n}.minted.example"))
                .expect("mint")
        })
    });
    c.final_summary();

    let cached = median_micros(|| handshake(&f, "cached.example"));
    let minted = median_micros(|| {
        n += 1;
        handshake(&f, &format!("s{n}.minted.example"));
    });
    println!("\nsummary (median of 400, in memory, client and server on one thread):");
    println!("  handshake with a cached leaf  {cached:>8.1} µs  (baseline)");
    println!(
        "  handshake minting the leaf    {minted:>8.1} µs  ({:.2}x, +{:.1} µs)",
        minted / cached,
        minted - cached
    );
}
