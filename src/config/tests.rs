//! The configuration's parsing and validation: every error names its key (and line).

use super::*;

#[test]
fn shipped_config_parses() {
    let text = include_str!("../../conf/robotsgate.yaml");
    let config = Config::from_yaml(text).expect("shipped config is valid");
    assert!(config.egress.allowed_ports.iter().any(|p| p.contains(443)));
    let text = include_str!("../../conf/production.yaml");
    let config = Config::from_yaml(text).expect("production config is valid");
    assert!(config.tls.ca_key.is_some());
    let text = include_str!("../../conf/fleet.yaml");
    let config = Config::from_yaml(text).expect("fleet config is valid");
    assert!(config.fleet.enabled());
    assert_eq!(config.fleet.on_unavailable, OnUnavailable::KeepOwned);
    assert_eq!(config.fleet.peer_address(), "10.0.0.5:7443");
}

#[test]
fn fleet_errors_name_the_key() {
    for (yaml, key) in [
        ("fleet:\n    redis: http://x\n", "robotsgate.fleet.redis"),
        (
            "fleet:\n    redis_cluster: [redis://a:1, tcp://b]\n",
            "robotsgate.fleet.redis_cluster[1]",
        ),
        (
            "fleet:\n    redis: redis://a\n    redis_cluster: [redis://b]\n",
            "robotsgate.fleet.redis`/`redis_cluster`/`redis_sentinel",
        ),
        (
            "fleet:\n    lease_seconds: 0\n",
            "robotsgate.fleet.lease_seconds",
        ),
        (
            "fleet:\n    on_unavailable: maybe\n",
            "robotsgate.fleet.on_unavailable",
        ),
        (
            "fleet:\n    on_unavailable: local\n",
            "robotsgate.fleet.on_unavailable",
        ),
    ] {
        let err = Config::from_yaml(&format!("robotsgate:\n  {yaml}"))
            .expect_err(yaml)
            .to_string();
        assert!(err.contains(key), "{yaml}: {err}");
    }
}

#[test]
fn fleet_mode_needs_a_complete_peer_channel() {
    for (yaml, key) in [
        ("redis: redis://a\n", "robotsgate.fleet.peer_listen"),
        (
            "redis: redis://a\n    peer_listen: 127.0.0.1:7443\n",
            "robotsgate.fleet.peer_ca",
        ),
        (
            "redis: redis://a\n    peer_listen: 0.0.0.0:7443\n    peer_ca: a\n    peer_cert: b\n    peer_key: c\n",
            "robotsgate.fleet.peer_address",
        ),
    ] {
        let config = Config::from_yaml(&format!("robotsgate:\n  fleet:\n    {yaml}")).expect(yaml);
        let err = config.fleet.check_peer_channel().expect_err(yaml).to_string();
        assert!(err.contains(key), "{yaml}: {err}");
    }
    let alone = Config::from_yaml("robotsgate:\n  listen: 127.0.0.1:1\n").expect("alone");
    assert!(alone.fleet.check_peer_channel().is_ok());
}

#[test]
fn the_fleet_ca_is_never_the_interception_ca() {
    let dir = tempfile::tempdir().expect("tempdir");
    let [ca, copy, other] = ["ca.pem", "copy.pem", "fleet.pem"].map(|f| dir.path().join(f));
    std::fs::write(&ca, "the interception CA").expect("write");
    std::fs::write(&copy, "the interception CA").expect("write");
    std::fs::write(&other, "a fleet CA").expect("write");
    let yaml = |peer: &std::path::Path| {
        format!(
            "robotsgate:\n  tls:\n    ca_cert: {}\n    ca_key: k\n  fleet:\n    peer_ca: {}\n",
            ca.display(),
            peer.display()
        )
    };
    for same in [&ca, &copy] {
        let err = Config::from_yaml(&yaml(same))
            .expect_err("refused")
            .to_string();
        assert!(err.contains("robotsgate.fleet.peer_ca"), "{err}");
    }
    assert!(Config::from_yaml(&yaml(&other)).is_ok());
    // PEM bundles: the interception CA among the fleet's, written apart, is refused.
    let block = |der: &[u8]| pem::encode(&pem::Pem::new("CERTIFICATE", der.to_vec()));
    std::fs::write(&ca, block(b"the interception CA")).expect("write");
    std::fs::write(
        &copy,
        block(b"the interception CA") + "\n" + &block(b"a fleet CA"),
    )
    .expect("write");
    let bundle = block(b"a fleet CA") + &block(b"the interception CA");
    std::fs::write(&other, bundle).expect("write");
    for bundle in [&copy, &other] {
        let err = Config::from_yaml(&yaml(bundle))
            .expect_err("a bundle holding the interception CA")
            .to_string();
        assert!(err.contains("robotsgate.fleet.peer_ca"), "{err}");
    }
    std::fs::write(&other, block(b"a fleet CA") + &block(b"the next fleet CA")).expect("write");
    assert!(Config::from_yaml(&yaml(&other)).is_ok());
}

#[test]
fn pingora_keys_and_missing_section_are_fine() {
    let config = Config::from_yaml("threads: 2\npid_file: /tmp/x.pid\n").expect("valid");
    assert_eq!(config.robots.max_redirects, 5);
}

#[test]
fn transparent_section() {
    let text = "robotsgate:\n  transparent:\n    http_listen: 127.0.0.1:8081\n    mode: tproxy\n    upstream_mark: 42\n";
    let config = Config::from_yaml(text).expect("valid");
    assert_eq!(config.transparent.mode, TransparentMode::Tproxy);
    assert_eq!(config.transparent.upstream_mark, Some(42));
    let text = "robotsgate:\n  transparent:\n    tls_listen: 127.0.0.1:8443\n";
    let err = Config::from_yaml(text).expect_err("no CA").to_string();
    assert!(err.contains("robotsgate.transparent.tls_listen"), "{err}");
    let text = "robotsgate:\n  transparent:\n    mode: nat\n";
    let err = Config::from_yaml(text).expect_err("bad mode").to_string();
    assert!(err.contains("transparent.mode"), "{err}");
}

#[test]
fn errors_name_the_key_and_line() {
    let text = "threads: 1\nrobotsgate:\n  egress:\n    allowed_ports: [\"80\", \"nope\"]\n";
    let err = Config::from_yaml(text).expect_err("invalid").to_string();
    assert!(err.contains("robotsgate.egress.allowed_ports[1]"), "{err}");
    assert!(err.contains("line 4"), "{err}");
    assert!(err.contains("`nope` is not a port"), "{err}");

    let text = "robotsgate:\n  robots:\n    ttl_secs: 5\n";
    let err = Config::from_yaml(text)
        .expect_err("unknown key")
        .to_string();
    assert!(
        err.contains("robotsgate.robots") && err.contains("ttl_secs") && err.contains("line 3"),
        "{err}"
    );

    let text = "robotsgate:\n  egress:\n    allow_destinations: [10.0.0.0/33]\n";
    let err = Config::from_yaml(text).expect_err("bad cidr").to_string();
    assert!(
        err.contains("allow_destinations[0]") && err.contains("line 3"),
        "{err}"
    );

    let text = "robotsgate:\n  tls:\n    blind_tunnel: [pinned.example, \"a b\"]\n";
    let err = Config::from_yaml(text).expect_err("bad rule").to_string();
    assert!(
        err.contains("robotsgate.tls.blind_tunnel[1]") && err.contains("line 3"),
        "{err}"
    );

    for bad in ["-1", "1e300", ".inf", ".nan"] {
        let text = format!("robotsgate:\n  pacing:\n    ceiling_seconds: {bad}\n");
        let err = Config::from_yaml(&text).expect_err(bad).to_string();
        assert!(
            err.contains("robotsgate.pacing.ceiling_seconds") && err.contains("line 3"),
            "{bad}: {err}"
        );
    }

    let text = "robotsgate:\n  limits:\n    first_byte_timeout_seconds: 0\n";
    let err = Config::from_yaml(text)
        .expect_err("zero timeout")
        .to_string();
    assert!(
        err.contains("robotsgate.limits.first_byte_timeout_seconds") && err.contains("line 3"),
        "{err}"
    );

    let text = "robotsgate:\n  robots:\n    max_redirects: 2\n";
    let err = Config::from_yaml(text)
        .expect_err("too few hops")
        .to_string();
    assert!(err.contains("robotsgate.robots.max_redirects"), "{err}");
}

#[test]
fn cidrs_and_ports() {
    let c: Cidr = "10.1.2.3/8".parse().expect("cidr");
    assert!(c.contains("10.200.0.1".parse().expect("ip")));
    let c: Cidr = "::1".parse().expect("bare ip");
    assert!(c.contains("::1".parse().expect("ip")));
    assert_eq!(
        PortRange::try_from("1025-65535".to_string()).ok(),
        Some(PortRange(1025, 65535))
    );
    assert!(PortRange::try_from("0".to_string()).is_err());
    assert!(PortRange::try_from("9-8".to_string()).is_err());
}

#[test]
fn two_listeners_on_one_address_are_refused_naming_both_keys() {
    let yaml = |listen: &str, admin: &str| {
        format!("robotsgate:\n  listen: \"{listen}\"\n  admin_listen: \"{admin}\"\n")
    };
    for (listen, admin) in [
        ("127.0.0.1:8080", "127.0.0.1:8080"),
        ("0.0.0.0:8080", "127.0.0.1:8080"),
        ("127.0.0.1:8080", "[::]:8080"),
    ] {
        let err = Config::from_yaml(&yaml(listen, admin))
            .expect_err("one address")
            .to_string();
        assert!(
            err.contains("robotsgate.admin_listen")
                && err.contains("robotsgate.listen")
                && err.contains("line 3"),
            "{listen} {admin}: {err}"
        );
    }
    // Another port, or the other family's loopback: listeners of their own.
    for (listen, admin) in [
        ("127.0.0.1:8080", "127.0.0.1:9090"),
        ("127.0.0.1:8080", "[::1]:8080"),
        ("0.0.0.0:8080", "[::1]:8080"),
    ] {
        Config::from_yaml(&yaml(listen, admin)).unwrap_or_else(|e| panic!("{listen} {admin}: {e}"));
    }
}
