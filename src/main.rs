//! The `roofline` command line: parse → resolve → run → exit code. Only this binary touches argv,
//! the terminal and exit statuses; errors print as one line and exit with status 2. A closed
//! stdout (`roofline devices | head -1`) ends quietly with status 0, as Unix tools do.

/// `eprintln!` that never panics: a message to a closed or full stderr is dropped.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod cli;

/// Weights, activations and KV caches on huge pages (see `roofline::heap`).
#[global_allocator]
static HEAP: roofline::heap::HugePageHeap = roofline::heap::HugePageHeap;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    if std::env::var_os("ROOFLINE_HEAP").is_some_and(|heap| heap == "system") {
        roofline::heap::disable();
    }
    let args = cli::Cli::parse();
    let result = cli::run(args).and_then(|code| {
        cli::flush_stdout()?;
        Ok(code)
    });
    match result {
        Ok(code) => code,
        Err(err) if cli::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            // Messages quote node names and paths from the model: no raw escape sequences.
            note!("error: {}", cli::safe(&format!("{err:#}")));
            ExitCode::from(cli::EXIT_BAD_INPUT)
        }
    }
}
