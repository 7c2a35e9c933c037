//! The README's five-minute tour, run as written: its origin command, the arguments its
//! run command gives `robotsgate run`, and each step's command on this test's own ports
//! (the README's 18000, 8080 and 9090 replaced); each step's output must hold the lines
//! the README prints under it, in order. A number of seconds printed may be larger than
//! the README's (a paced answer comes a Crawl-delay apart or later), never smaller. The
//! origin's own log must show the three paced pages and never the disallowed one.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    free_port, free_ports, listens_on, repo_root, run_output, start_listening, Running,
};

/// One code block of the tour: its command and the lines the README prints under it.
#[derive(Debug)]
struct Block {
    command: String,
    printed: Vec<String>,
}

/// The `sh` code blocks of the README's tour section, in order.
fn blocks(readme: &str) -> Vec<Block> {
    let start = readme
        .find("## A five-minute tour")
        .expect("the tour section");
    let section = &readme[start..];
    let end = section[3..].find("\n## ").map_or(section.len(), |e| e + 3);
    let mut out = Vec::new();
    let mut lines = section[..end].lines();
    while let Some(line) = lines.next() {
        if line.trim() != "```sh" {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let (mut command, mut printed) = (String::new(), Vec::new());
        for line in lines.by_ref().take_while(|l| l.trim() != "```") {
            let line = line.get(indent..).unwrap_or(line.trim_start());
            match line.strip_prefix("# ") {
                Some(said) => printed.push(said.trim().to_string()),
                None => command.extend([line, "\n"]),
            }
        }
        out.push(Block { command, printed });
    }
    out
}

/// This test's ports: the origin's, the proxy's and the admin listener's.
struct Ports {
    origin: u16,
    proxy: u16,
    admin: u16,
}

impl Ports {
    /// `text` with the README's ports replaced by these.
    fn put(&self, text: &str) -> String {
        text.replace("127.0.0.1:18000", &format!("127.0.0.1:{}", self.origin))
            .replace("127.0.0.1:8080", &format!("127.0.0.1:{}", self.proxy))
            .replace("127.0.0.1:9090", &format!("127.0.0.1:{}", self.admin))
    }
}

/// Are `said` and `printed` the same line, a number of seconds in `said` at least the
/// README's?
fn same_line(printed: &str, said: &str) -> bool {
    let printed_words: Vec<&str> = printed.split_whitespace().collect();
    let said_words: Vec<&str> = said.split_whitespace().collect();
    printed_words.len() == said_words.len()
        && printed_words
            .iter()
            .zip(&said_words)
            .enumerate()
            .all(|(i, (p, s))| {
                let seconds = printed_words.get(i + 1) == Some(&"s");
                match (seconds, p.parse::<u64>(), s.parse::<u64>()) {
                    (true, Ok(p), Ok(s)) => s >= p,
                    _ => p == s,
                }
            })
}

/// `printed` appears in `output`'s lines, in order.
fn assert_printed(block: &Block, ports: &Ports, output: &str) {
    let mut said = output.lines().map(str::trim);
    for want in &block.printed {
        let want = ports.put(want);
        assert!(
            said.any(|line| same_line(&want, line)),
            "`{}` did not print `{want}`:\n{output}",
            block.command
        );
    }
}

/// The tour's origin, as the README starts it, on `port`.
/// Its log (Python's `http.server` writes one line per request to stderr) goes to `log`.
fn origin(command: &str, log: &std::path::Path) -> (Running, u16) {
    let script = command.trim();
    assert_eq!(
        script, "scripts/tour-origin.sh",
        "the tour's origin command"
    );
    let (child, port) = start_listening("the tour's origin", free_port, |port| {
        Command::new(repo_root().join(script))
            .arg(port.to_string())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).expect("origin log"))
            .spawn()
            .expect("tour-origin.sh")
    });
    (Running(child), port)
}

/// robotsgate as `scripts/run.sh ARGS` runs it (its shipped configuration, the CA it
/// makes in `var/`), in a directory of its own, on `ports`.
fn robotsgate(command: &str, dir: &std::path::Path, ports: &Ports) -> Running {
    let args = command
        .trim()
        .strip_prefix("scripts/run.sh")
        .expect("the tour's run command is scripts/run.sh");
    let run = std::fs::read_to_string(repo_root().join("scripts/run.sh")).expect("run.sh");
    let exec = "exec target/release/robotsgate run --config conf/robotsgate.yaml \"$@\"";
    assert!(run.contains(exec), "run.sh no longer runs `{exec}`");
    for made in ["conf", "var"] {
        std::fs::create_dir_all(dir.join(made)).expect("conf and var");
    }
    std::fs::copy(
        repo_root().join("conf/robotsgate.yaml"),
        dir.join("conf/robotsgate.yaml"),
    )
    .expect("copy the shipped configuration");
    let bin = env!("CARGO_BIN_EXE_robotsgate");
    let (made, said) = run_output(Command::new(bin).current_dir(dir).args([
        "ca",
        "init",
        "--cert",
        "var/ca.pem",
        "--key",
        "var/ca.key",
    ]));
    assert!(made, "{said}");
    let listen = [
        format!("--listen=127.0.0.1:{}", ports.proxy),
        format!("--admin-listen=127.0.0.1:{}", ports.admin),
    ];
    let mut child = Running(
        Command::new(bin)
            .current_dir(dir)
            .args(["run", "--config", "conf/robotsgate.yaml"])
            .args(args.split_whitespace())
            .args(listen)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("robotsgate.log")).expect("log"))
            .spawn()
            .expect("robotsgate run"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(listens_on(child.id(), ports.proxy) && listens_on(child.id(), ports.admin)) {
        let exited = child.try_wait().ok().flatten().is_some();
        if exited || Instant::now() > deadline {
            let log = std::fs::read_to_string(dir.join("robotsgate.log")).unwrap_or_default();
            panic!("robotsgate did not start:\n{log}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// The README's tour, by hand: the origin and robotsgate started with its commands, each
/// step run as written, and what each prints is what the README says it prints.
#[test]
fn the_readmes_tour_prints_what_the_readme_says() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README");
    let blocks = blocks(&readme);
    assert_eq!(blocks.len(), 5, "the start and four steps: {blocks:#?}");
    let start: Vec<&str> = blocks[0].command.lines().collect();
    assert_eq!(start.len(), 2, "an origin and robotsgate: {start:?}");
    let dir = tempfile::tempdir().expect("tempdir");
    let origin_log = dir.path().join("origin.log");
    let (_origin, origin_port) = origin(start[0], &origin_log);
    let [proxy, admin] = free_ports();
    let ports = Ports {
        origin: origin_port,
        proxy,
        admin,
    };
    let _robotsgate = robotsgate(start[1], dir.path(), &ports);
    for block in &blocks[1..] {
        assert!(
            !block.printed.is_empty(),
            "{block:?} says nothing it prints"
        );
        let (ok, output) =
            run_output(Command::new("bash").args(["-c", &ports.put(&block.command)]));
        assert!(ok, "`{}` failed:\n{output}", block.command);
        assert_printed(block, &ports, &output);
    }
    // What the origin received (each answer was logged before it was sent): the three
    // paced pages, and never the disallowed one.
    let received = std::fs::read_to_string(&origin_log).expect("origin log");
    let count = |path: &str| received.matches(&format!("\"GET {path} HTTP")).count();
    assert_eq!(count("/page"), 3, "{received}");
    assert_eq!(count("/private/page"), 0, "{received}");
}

/// The comparison of printed lines is not lenient: a word changed, a line missing or
/// fewer seconds than the README's is not what it says.
#[test]
fn a_printed_line_must_be_the_readmes() {
    assert!(same_line("200 after 1 s", "200 after 1 s"));
    assert!(same_line("200 after 1 s", "200 after 2 s"));
    assert!(!same_line("200 after 1 s", "200 after 0 s"));
    assert!(!same_line("200 after 1 s", "503 after 1 s"));
    assert!(!same_line("HTTP/1.1 403 Forbidden", "HTTP/1.1 200 OK"));
    assert!(!same_line("a 1", "a 2"));
}
