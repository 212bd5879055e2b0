//! `ringload`: parse the command line, run the command, exit with its documented code.

use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;
use ringload::{cli::Cli, commands, exit};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => match err.kind() {
            ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => err.exit(),
            _ => {
                eprintln!("ringload: {}", usage_error_line(&err.to_string()));
                return ExitCode::from(exit::USAGE);
            }
        },
    };
    match commands::dispatch(cli.command) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("ringload: {}", exit::one_line(&err));
            ExitCode::from(commands::exit_code(&err))
        }
    }
}

/// clap's usage error on one line: the message without its usage block, plus where help is.
fn usage_error_line(rendered: &str) -> String {
    let message = rendered.split("\n\nUsage:").next().unwrap_or(rendered);
    let message = message.trim().trim_start_matches("error: ");
    let words: Vec<&str> = message.split_whitespace().collect();
    format!("{}; see 'ringload --help'", words.join(" "))
}
