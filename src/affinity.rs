//! Where rank threads run: the CPUs this process may use (its affinity mask), `--cpus` lists
//! checked against it, and pinning a thread to one CPU.

use crate::exit::UsageError;

/// The CPUs this process may run on (its affinity mask), read once before any pinning.
pub fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&cpu| set.is_set(cpu))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Parses a CPU list such as `0-3,6`.
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, String> {
    let bad = || format!("'{text}' is not a CPU list; write e.g. 0-3,6");
    let mut cpus = Vec::new();
    for part in text.split(',') {
        let part = part.trim();
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let first: usize = first.parse().map_err(|_| bad())?;
        let last: usize = last.parse().map_err(|_| bad())?;
        if first > last || last >= rustix::thread::CpuSet::MAX_CPU {
            return Err(bad());
        }
        for cpu in first..=last {
            if !cpus.contains(&cpu) {
                cpus.push(cpu);
            }
        }
    }
    Ok(cpus)
}

/// The cores this process may use.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// The CPUs rank threads are pinned to: `--cpus`, each checked against the process's affinity
/// mask, or the whole mask; and a note when ranks outnumber them.
pub fn choose_cpus(
    asked: Option<&str>,
    np: u32,
) -> Result<(Vec<usize>, Option<String>), UsageError> {
    let allowed = allowed_cpus();
    let cpus = match asked {
        None => allowed,
        Some(text) => {
            let cpus = parse_cpu_list(text).map_err(|e| UsageError(format!("--cpus {e}")))?;
            if let Some(cpu) = cpus.iter().find(|c| !allowed.contains(c)) {
                return Err(UsageError(format!(
                    "--cpus {text}: CPU {cpu} is not in this process's affinity mask ({}); \
                     choose from those",
                    allowed
                        .iter()
                        .map(usize::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                )));
            }
            cpus
        }
    };
    let shared = (!cpus.is_empty() && np as usize > cpus.len()).then(|| {
        format!(
            "{np} ranks on {} CPUs: rank threads share cores (pinned round-robin), so a rank \
             may wait for a core as well as for storage",
            cpus.len()
        )
    });
    Ok((cpus, shared))
}

/// Pins the calling thread to `cpu`.
pub fn pin(cpu: usize) -> Result<(), String> {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set)
        .map_err(|e| format!("cannot pin a rank thread to CPU {cpu}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,6"), Ok(vec![0, 1, 2, 3, 6]));
        assert_eq!(parse_cpu_list("1"), Ok(vec![1]));
        assert_eq!(parse_cpu_list("1,1,0"), Ok(vec![1, 0]));
        for bad in ["", "a", "3-1", "0-", "-1", "0,,1", "99999"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad}");
        }
        assert!(!allowed_cpus().is_empty());
    }
}
