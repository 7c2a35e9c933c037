//! The Debian package: `scripts/package.sh` (cargo-deb) builds it, here from the release
//! binary the tests run (what ships is built with the `dist` profile, the same code
//! with link-time optimisation); `dpkg-deb` lists its files, conffiles and maintainer scripts;
//! `lintian` finds no error; the unit as installed (from the extracted tree) passes
//! `systemd-analyze verify`, alone and with the net-admin drop-in, and keeps its
//! exposure within 2.0.

use std::path::Path;
use std::process::Command;

use crate::common::run_output;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn the_debian_package_installs_the_service_and_passes_lintian() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    // The release binary the tests run is what gets packaged (--no-build).
    let (ok, text) = run_output(Command::new(format!("{ROOT}/scripts/package.sh")).args([
        "--profile",
        "release",
        "--no-build",
        "--output",
        path(&out),
    ]));
    assert!(ok, "{text}");
    let deb = std::fs::read_dir(&out)
        .expect("output dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .unwrap_or_else(|| panic!("no .deb in {}: {text}", out.display()));
    let name = deb.file_name().and_then(|n| n.to_str()).expect("name");
    assert_eq!(
        name,
        format!("robotsgate_{}-1_amd64.deb", env!("CARGO_PKG_VERSION"))
    );
    println!(
        "package: {name}, {} bytes",
        std::fs::metadata(&deb).expect("size").len()
    );

    its_files(&deb);
    its_control_data(&deb, dir.path());
    lintian_finds_no_error(&deb);
    the_unit_as_installed(&deb, dir.path());
}

/// The package's files: the binary (executable), the unit and its drop-in, the
/// tmpfiles entry, the configuration, the dashboard and alerts, the copyright and changelog.
fn its_files(deb: &Path) {
    let (ok, listing) = run_output(Command::new("dpkg-deb").args(["--contents", path(deb)]));
    assert!(ok, "{listing}");
    for file in [
        "./usr/bin/robotsgate",
        "./usr/lib/systemd/system/robotsgate.service",
        "./lib/systemd/system/robotsgate-net-admin.conf",
        "./usr/lib/tmpfiles.d/robotsgate.conf",
        "./etc/robotsgate/robotsgate.yaml",
        "./usr/share/robotsgate/grafana-dashboard.json",
        "./usr/share/robotsgate/prometheus-alerts.yaml",
        "./usr/share/doc/robotsgate/copyright",
        "./usr/share/doc/robotsgate/changelog.Debian.gz",
    ] {
        assert!(
            listing.lines().any(|l| l.ends_with(file)),
            "{file} missing:\n{listing}"
        );
    }
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with("-rwxr-xr-x 0/0") && l.ends_with("./usr/bin/robotsgate")),
        "{listing}"
    );
}

/// Its control data: the conffile, the dependency on adduser, maintainer scripts that
/// set up the user, CA, token and key and remove them only on purge (checked by `sh -n`).
fn its_control_data(deb: &Path, dir: &Path) {
    let (ok, info) = run_output(Command::new("dpkg-deb").args(["--info", path(deb)]));
    assert!(ok, "{info}");
    assert!(info.contains("Depends: adduser"), "{info}");
    let control = dir.join("control");
    let (ok, text) =
        run_output(Command::new("dpkg-deb").args(["--control", path(deb), path(&control)]));
    assert!(ok, "{text}");
    let read = |name: &str| std::fs::read_to_string(control.join(name)).expect(name);
    assert_eq!(read("conffiles").trim(), "/etc/robotsgate/robotsgate.yaml");
    let postinst = read("postinst");
    for step in [
        "adduser --system",
        "install -d -o robotsgate -g robotsgate -m 0750 \"$dir\"",
        "robotsgate ca init",
        "admin.token",
        "state.key",
        "systemd-tmpfiles --create robotsgate.conf",
        "deb-systemd-helper enable robotsgate.service",
        "deb-systemd-invoke reload robotsgate.service",
    ] {
        assert!(
            postinst.contains(step),
            "postinst lacks {step}:\n{postinst}"
        );
    }
    let postrm = read("postrm");
    let purge = postrm
        .split("purge)")
        .nth(1)
        .and_then(|rest| rest.split(";;").next())
        .expect("a purge branch");
    for step in [
        "rm -rf /var/lib/robotsgate",
        "deluser",
        "ca.key",
        "admin.token",
        "state.key",
    ] {
        assert!(purge.contains(step), "purge lacks {step}:\n{postrm}");
    }
    // Nothing is removed but on purge; an upgrade does not stop the service.
    assert_eq!(
        postrm.matches("rm -").count(),
        purge.matches("rm -").count()
    );
    assert!(!read("prerm").contains("upgrade"), "{}", read("prerm"));
    for script in ["postinst", "postrm", "prerm"] {
        let (ok, text) = run_output(Command::new("sh").args(["-n", path(&control.join(script))]));
        assert!(ok, "{script}: {text}");
    }
}

/// lintian: no error (the two warnings kept are explained in docs/install.md).
fn lintian_finds_no_error(deb: &Path) {
    let (_, lint) =
        run_output(Command::new("lintian").args(["--tag-display-limit", "0", path(deb)]));
    let errors: Vec<&str> = lint.lines().filter(|l| l.starts_with("E:")).collect();
    assert!(errors.is_empty(), "{lint}");
    println!("lintian:\n{lint}");
}

/// The unit as installed, its binary the extracted one: `systemd-analyze verify` clean
/// with and without the net-admin drop-in, exposure at most 2.0, and the packaged
/// configuration the production one.
fn the_unit_as_installed(deb: &Path, dir: &Path) {
    let tree = dir.join("tree");
    let (ok, text) =
        run_output(Command::new("dpkg-deb").args(["--extract", path(deb), path(&tree)]));
    assert!(ok, "{text}");
    let binary = tree.join("usr/bin/robotsgate");
    let (ok, version) = run_output(Command::new(&binary).arg("--version"));
    assert!(
        ok && version.contains(env!("CARGO_PKG_VERSION")),
        "{version}"
    );
    let units = dir.join("units");
    std::fs::create_dir(&units).expect("units");
    let unit = std::fs::read_to_string(tree.join("usr/lib/systemd/system/robotsgate.service"))
        .expect("unit")
        .replace("/usr/bin/robotsgate", path(&binary));
    assert!(unit.contains("User=robotsgate") && unit.contains("StateDirectory=robotsgate"));
    let unit_path = units.join("robotsgate.service");
    std::fs::write(&unit_path, unit).expect("write unit");
    let verify = || {
        let (ok, text) =
            run_output(Command::new("systemd-analyze").args(["verify", path(&unit_path)]));
        let ours: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("robotsgate.service"))
            .collect();
        assert!(ok && ours.is_empty(), "{text}");
    };
    verify();
    let drop_ins = units.join("robotsgate.service.d");
    std::fs::create_dir(&drop_ins).expect("drop-in dir");
    std::fs::copy(
        tree.join("lib/systemd/system/robotsgate-net-admin.conf"),
        drop_ins.join("net-admin.conf"),
    )
    .expect("drop-in");
    verify();
    let (_, security) = run_output(Command::new("systemd-analyze").args([
        "security",
        "--offline=true",
        path(&unit_path),
    ]));
    let exposure: f64 = security
        .lines()
        .find_map(|l| l.split_once("Overall exposure level for robotsgate.service: "))
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no exposure in:\n{security}"));
    assert!(exposure <= 2.0, "{security}");

    // The packaged configuration is the production one, which check-config accepts.
    assert_eq!(
        std::fs::read_to_string(tree.join("etc/robotsgate/robotsgate.yaml")).expect("conf"),
        std::fs::read_to_string(format!("{ROOT}/conf/production.yaml")).expect("production")
    );
}
