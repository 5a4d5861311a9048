//! The `roofline` command line: parse → resolve → run → exit code. Only this binary touches argv,
//! the terminal and exit statuses; errors print as one line and exit with status 2.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(cli::EXIT_BAD_INPUT)
        }
    }
}
