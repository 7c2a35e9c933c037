use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    match robotsgate::cli::Cli::parse().run() {
        Ok(code) => code,
        Err(err) => {
            eprintln!("robotsgate: {err:#}");
            ExitCode::from(2)
        }
    }
}
