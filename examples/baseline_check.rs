//! The baseline for `bench/check_1m.sh`: the same work as `robotsgate check --summary`,
//! done with the `texting_robots` crate (a dev-dependency used only for comparison).
//!
//! `cargo run --release --example baseline_check -- ROBOTS AGENT URLS_FILE`
//! prints `allowed N, disallowed M` like `robotsgate check --summary`.
//! `cargo run --release --example baseline_check -- --generate ROBOTS COUNT` instead
//! writes COUNT URLs aimed at ROBOTS' rules to standard output (the benchmark's input).

use std::io::{BufRead, BufReader, BufWriter, Write};

#[path = "../benches/support/urls.rs"]
mod urls;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag, robots, count] if flag == "--generate" => {
            let robots = std::fs::read_to_string(robots)?;
            let mut out = BufWriter::new(std::io::stdout().lock());
            for url in urls::urls_for(
                &robots,
                "https://www.example-megasite.com",
                count.parse()?,
                7,
            ) {
                writeln!(out, "{url}")?;
            }
            out.flush()?;
        }
        [robots, agent, urls_file] => {
            let robot = texting_robots::Robot::new(agent, &std::fs::read(robots)?)?;
            let (mut allowed, mut disallowed) = (0u64, 0u64);
            for line in BufReader::new(std::fs::File::open(urls_file)?).lines() {
                let line = line?;
                if line.is_empty() {
                    continue;
                }
                if robot.allowed(&line) {
                    allowed += 1;
                } else {
                    disallowed += 1;
                }
            }
            println!("allowed {allowed}, disallowed {disallowed}");
        }
        _ => {
            return Err(
                "usage: baseline_check ROBOTS AGENT URLS_FILE | --generate ROBOTS COUNT".into(),
            )
        }
    }
    Ok(())
}
