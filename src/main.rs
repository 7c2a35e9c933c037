use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    match robotsgate::cli::Cli::parse().run() {
        Ok(code) => code,
        Err(err) => {
            eprintln!("robotsgate: {err:#}");
            ExitCode::from(2)
        }
    }
}
