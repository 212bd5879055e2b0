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
                let args: Vec<String> = std::env::args().collect();
                let line = negative_value_line(&err, &args)
                    .or_else(|| elsewhere_line(&err, &args))
                    .unwrap_or_else(|| usage_error_line(&err.to_string()));
                say(&line);
                return ExitCode::from(exit::USAGE);
            }
        },
    };
    match commands::dispatch(cli.command) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            say(&exit::one_line(&err));
            ExitCode::from(commands::exit_code(&err))
        }
    }
}

/// `ringload: LINE` on stderr in one write, so that lines of processes sharing a terminal (under
/// mpirun) never interleave.
fn say(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("ringload: {line}\n").as_bytes());
}

/// A negative number given to a flag: clap takes it for an unknown flag and suggests `-- -1`,
/// which would not help. Every number ringload takes is positive: say so, naming the flag.
fn negative_value_line(err: &clap::Error, args: &[String]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    if err.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(value)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    // clap names what it took for a flag: all of `-1`, or just `-0` of `-0.5`.
    let negative = |a: &String| a.starts_with('-') && a[1..].parse::<f64>().is_ok();
    let at = args
        .iter()
        .position(|a| a.starts_with(value.as_str()) && negative(a))?;
    let flag = args[..at].last().filter(|f| f.starts_with("--"))?;
    Some(format!(
        "{flag} {}: negative values are not allowed; give a positive number; see \
         'ringload --help'",
        args[at]
    ))
}

/// A flag given to a command that does not take it, but another does: where it belongs.
fn elsewhere_line(err: &clap::Error, args: &[String]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    if err.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(flag)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    let command = args.get(1).map_or("ringload", String::as_str);
    let flag = flag.split('=').next().unwrap_or(flag);
    (flag == "--hosts").then(|| {
        format!(
            "--hosts is not a flag of `ringload {command}`: a run over several client hosts is \
             one ringload process per host started by mpirun (`mpirun -np HOSTS --host a,b \
             ringload run … --endpoint URL`, the `mpi` feature; README: Several client hosts); \
             --hosts belongs to `plan` (a checkpoint's ranks spread over hosts), `datasize` and \
             `sweep --find-max-np` (client hosts for the dataset-size rule)"
        )
    })
}

/// clap's usage error without its usage block: its first line, then where help is, then its
/// other lines as clap wrote them (a tip, the possible values), so that nothing runs into the
/// sentence before it; a list after a colon (the missing arguments) stays on the first line.
fn usage_error_line(rendered: &str) -> String {
    let message = rendered.split("\n\nUsage:").next().unwrap_or(rendered);
    let message = message.trim().trim_start_matches("error: ");
    let mut lines = message
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with("For more information"));
    let first = lines.next().unwrap_or("invalid arguments").trim();
    let rest: Vec<&str> = lines.map(str::trim_start).collect();
    // A first line that introduces a list ("…not provided:") takes the list on its line.
    if first.ends_with(':') && !rest.is_empty() {
        return format!("{first} {}; see 'ringload --help'", rest.join(", "));
    }
    let mut out = format!("{first}; see 'ringload --help'");
    for line in &rest {
        out.push_str("\n  ");
        out.push_str(line);
    }
    out
}
