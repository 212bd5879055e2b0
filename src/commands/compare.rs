//! `ringload compare`: ringload's results, sweep folders and DLIO's output side by side
//! (training by (NP, RT), checkpoints by (workload, NP)), as a table, CSV or JSON.

use std::io::Write;

use crate::cli::CompareArgs;
use crate::exit;

/// Runs `compare`; `Ok` carries the exit code.
pub fn compare(args: &CompareArgs) -> anyhow::Result<u8> {
    use crate::compare::{CompareError, Input, checkpoint};
    let mut entries = Vec::new();
    let mut checkpoints = Vec::new();
    let mut first_of_kind: [Option<&std::path::PathBuf>; 2] = [None, None];
    for (i, path) in args.inputs.iter().enumerate() {
        let letter = (b'A' + (i % 26) as u8) as char;
        match crate::compare::read_input(path, letter)? {
            Input::Training(e) => {
                first_of_kind[0].get_or_insert(path);
                entries.extend(e);
            }
            Input::Checkpoint(e) => {
                first_of_kind[1].get_or_insert(path);
                checkpoints.extend(e);
            }
        }
    }
    if let [Some(training), Some(checkpoint)] = first_of_kind {
        return Err(CompareError {
            path: checkpoint.clone(),
            reason: format!(
                "a checkpoint result beside training results ({}); compare checkpoint results \
                 with checkpoint results only",
                training.display()
            ),
        }
        .into());
    }
    let (json, csv, markdown) = if first_of_kind[1].is_some() {
        let c = checkpoint::compare(checkpoints);
        (
            serde_json::to_string_pretty(&c)?,
            checkpoint::csv(&c),
            checkpoint::markdown(&c),
        )
    } else {
        let c = crate::compare::compare(entries);
        (
            serde_json::to_string_pretty(&c)?,
            crate::compare::csv(&c),
            crate::compare::markdown(&c),
        )
    };
    let mut stdout = std::io::stdout().lock();
    if args.json {
        writeln!(stdout, "{json}")?;
    } else if args.csv {
        write!(stdout, "{csv}")?;
    } else {
        for (i, path) in args.inputs.iter().enumerate() {
            writeln!(
                stdout,
                "{}: {}",
                (b'A' + (i % 26) as u8) as char,
                path.display()
            )?;
        }
        writeln!(stdout)?;
        write!(stdout, "{markdown}")?;
    }
    Ok(exit::OK)
}
