//! How many files a training dataset needs under MLPerf Storage's rules (Rules.md 3.1.2,
//! mlpstorage `calculate_training_data_size`): enough that the clients' memory cannot cache it
//! (5 × their memory) and enough for 500 steps of every process.

use serde::Serialize;

/// What the dataset-size rule asks of one workload on one set of clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TrainingSize {
    /// Memory of all client hosts together: hosts × memory per host.
    pub client_memory_bytes: u128,
    /// samples per file × record length.
    pub file_bytes: u64,
    /// ⌊5 × client memory ÷ file bytes⌋.
    pub files_for_memory: u64,
    /// ⌊500 × processes × batch ÷ samples per file⌋.
    pub files_for_steps: u64,
    /// The larger of the two: the files the rule asks for.
    pub files: u64,
    /// files × file bytes: what the store must hold.
    pub total_bytes: u128,
}

/// What the workload's files are and who reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clients {
    pub hosts: u32,
    pub memory_per_host_bytes: u64,
    /// Accelerators (DLIO processes) of all hosts together.
    pub processes: u64,
}

/// The rule's files for `clients` reading files of `samples_per_file` records of
/// `record_bytes` each, in batches of `batch`. Zero sizes give zero files, never a division
/// by zero: the caller's settings refuse them first.
pub fn training_files(
    clients: Clients,
    batch: u64,
    samples_per_file: u64,
    record_bytes: u64,
) -> TrainingSize {
    let client_memory_bytes = u128::from(clients.hosts) * u128::from(clients.memory_per_host_bytes);
    let file_bytes = samples_per_file.saturating_mul(record_bytes);
    let files_for_memory = (5 * client_memory_bytes)
        .checked_div(u128::from(file_bytes))
        .map_or(0, |f| u64::try_from(f).unwrap_or(u64::MAX));
    let files_for_steps = (500u128 * u128::from(clients.processes) * u128::from(batch))
        .checked_div(u128::from(samples_per_file))
        .map_or(0, |f| u64::try_from(f).unwrap_or(u64::MAX));
    let files = files_for_memory.max(files_for_steps);
    TrainingSize {
        client_memory_bytes,
        file_bytes,
        files_for_memory,
        files_for_steps,
        files,
        total_bytes: u128::from(files) * u128::from(file_bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn host(memory_gib: u64, processes: u64) -> Clients {
        Clients {
            hosts: 1,
            memory_per_host_bytes: memory_gib * GIB,
            processes,
        }
    }

    /// The reference's worked figures (B4): unet3d and retinanet, 8 accelerators, one host of
    /// 512 GiB. unet3d: 5 × 512 GiB ÷ 146,600,628 B = 18,750 files, 500 × 8 × 7 ÷ 1 = 28,000.
    #[test]
    fn the_reference_worked_examples() {
        let unet = training_files(host(512, 8), 7, 1, 146_600_628);
        assert_eq!(
            (unet.files_for_memory, unet.files_for_steps, unet.files),
            (18_750, 28_000, 28_000)
        );
        assert_eq!(unet.total_bytes, 28_000 * 146_600_628);
        // retinanet: 500 × 8 × 24 = 96,000; 5 × 512 GiB ÷ 322,957 B = 8,511,284.
        let retina = training_files(host(512, 8), 24, 1, 322_957);
        assert_eq!(
            (
                retina.files_for_memory,
                retina.files_for_steps,
                retina.files
            ),
            (8_511_284, 96_000, 8_511_284)
        );
    }

    #[test]
    fn hosts_multiply_the_memory_and_zero_sizes_give_zero() {
        let two = training_files(
            Clients {
                hosts: 2,
                memory_per_host_bytes: 512 * GIB,
                processes: 8,
            },
            7,
            1,
            146_600_628,
        );
        // 10 × 512 GiB ÷ 146,600,628 B = 37,500.2.
        assert_eq!(two.files_for_memory, 37_500);
        let zero = training_files(host(512, 8), 7, 0, 0);
        assert_eq!((zero.files_for_memory, zero.files_for_steps), (0, 0));
    }
}
