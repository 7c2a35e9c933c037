//! A member reports when its certificate and the fleet CA expire, as OpenSSL reads
//! them from the files it was given: the gauges the expiry alerts watch.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{curl, run_output, Proxy};
use crate::fleet_fixture::{
    backend_up, fleet_conf, handed_over, handed_over_reaching, instances, paced_origin,
};
use crate::redis_servers::Redis;

/// When the certificate in `file` expires (Unix time), as OpenSSL and `date` read it.
fn openssl_expiry(file: &str) -> f64 {
    let (ok, said) =
        run_output(Command::new("openssl").args(["x509", "-enddate", "-noout", "-in", file]));
    assert!(ok, "{said}");
    let date = said.trim().trim_start_matches("notAfter=").to_string();
    let (ok, seconds) = run_output(Command::new("date").args(["-u", "-d", &date, "+%s"]));
    assert!(ok, "{seconds}");
    seconds.trim().parse().expect("seconds")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_reports_when_its_certificate_and_the_fleet_ca_expire() {
    let redis = Redis::start();
    let conf = fleet_conf(&redis);
    let proxies = instances(1, &conf);
    backend_up(&proxies).await;
    let member = proxies[0].file("member.pem");
    let ca = conf.text("fleet.peer_ca").expect("the fleet CA");
    for (metric, file) in [
        (
            "robotsgate_fleet_peer_cert_expiry_timestamp_seconds",
            member.to_string_lossy().into_owned(),
        ),
        ("robotsgate_fleet_peer_ca_expiry_timestamp_seconds", ca),
    ] {
        let reported = proxies[0].metric(metric);
        assert_eq!(reported, Some(openssl_expiry(&file)), "{metric} ({file})");
    }
}

/// Member `name`'s certificate and key in `dir`, from the CA `ca` (`{ca}.pem`, made
/// first when it does not exist yet): the certificate's and key's paths.
fn fleet_cert(dir: &Path, ca: &str, name: &str) -> (PathBuf, PathBuf) {
    let file = |stem: &str, ext: &str| dir.join(format!("{stem}.{ext}"));
    let (cert, key) = (file(name, "pem"), file(name, "key"));
    crate::common::fleet_cert(&file(ca, "pem"), &file(ca, "key"), &cert, &key, name);
    (cert, key)
}

/// The fleet CA rotated as `docs/certificates.md` says, half-way: every member trusts
/// the old CA and the new one (one `fleet.peer_ca` file holding both), one member still
/// has its certificate from the old CA and the other already one from the new CA; each
/// hands the other's origins over, and each origin receives each request once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_with_certificates_from_the_old_and_the_new_fleet_ca_hand_over() {
    let redis = Redis::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let old = fleet_cert(dir.path(), "old-ca", "member-old");
    let new = fleet_cert(dir.path(), "new-ca", "member-new");
    let both = dir.path().join("peer-ca.pem");
    let pem = |name: &str| std::fs::read_to_string(dir.path().join(name)).expect("CA");
    std::fs::write(&both, pem("old-ca.pem") + &pem("new-ca.pem")).expect("both CAs");
    let member = |(cert, key): &(PathBuf, PathBuf)| {
        fleet_conf(&redis)
            .set("fleet.peer_ca", both.to_string_lossy())
            .set("fleet.peer_cert", cert.to_string_lossy())
            .set("fleet.peer_key", key.to_string_lossy())
    };
    let proxies = vec![
        Proxy::start_for_loopback(&member(&old)),
        Proxy::start_for_loopback(&member(&new)),
    ];
    backend_up(&proxies).await;
    for order in [[0, 1], [1, 0]] {
        let origin = paced_origin("0").await;
        let pair = [&proxies[order[0]], &proxies[order[1]]];
        assert_eq!(curl(pair[0], &origin.url("/first"), &[]).0, 200);
        assert_eq!(curl(pair[1], &origin.url("/handed"), &[]).0, 200);
        assert!(
            handed_over(pair[1]) >= 1.0,
            "not handed over:\n{}",
            pair[1].log()
        );
        for path in ["/first", "/handed"] {
            assert_eq!(origin.count(path), 1, "{path}");
        }
    }
    // Each member handed over one request: the other's origin's.
    for proxy in &proxies {
        assert_eq!(
            handed_over_reaching(proxy, 1.0).await,
            1.0,
            "{}",
            proxy.log()
        );
    }
}
