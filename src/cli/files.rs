//! The flags that put a run on a mounted file system (`run`, `sweep`): the data directory,
//! `O_DIRECT` or the page cache, and dropping the caches before the clock.

use std::path::PathBuf;

use clap::Args;

/// `--direct`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum Direct {
    /// `O_DIRECT`: the device writes straight into the registered buffers.
    #[default]
    On,
    /// Through the page cache, as DLIO reads and writes files.
    Off,
}

#[derive(Debug, Clone, PartialEq, Args, Default)]
pub struct FileArgs {
    /// Read (and write checkpoints) on a mounted file system under DIR instead of an S3
    /// store: the workload's keys (<data_folder>/train/…, <checkpoint_folder>/…) are paths
    /// under DIR, as `ringload generate --output DIR` writes them (also
    /// storage.storage_type=local_fs with storage.storage_root=DIR)
    #[arg(long, value_name = "DIR", help_heading = "File system")]
    pub data_dir: Option<PathBuf>,

    /// With --data-dir: O_DIRECT reads and writes into the registered buffers (on), or through
    /// the page cache as DLIO does (off)
    #[arg(long, value_enum, default_value_t = Direct::On, help_heading = "File system")]
    pub direct: Direct,

    /// With --data-dir, as root: write back and drop the page cache (echo 3 >
    /// /proc/sys/vm/drop_caches) before the clock starts
    #[arg(long, help_heading = "File system")]
    pub drop_caches: bool,
}

impl FileArgs {
    /// These flags as a command line.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(dir) = &self.data_dir {
            args.extend(["--data-dir".to_string(), dir.display().to_string()]);
        }
        if self.direct == Direct::Off {
            args.extend(["--direct".to_string(), "off".to_string()]);
        }
        if self.drop_caches {
            args.push("--drop-caches".into());
        }
        args
    }

    /// The request's part.
    pub fn request(&self) -> crate::run::request::FileRequest {
        crate::run::request::FileRequest {
            data_dir: self.data_dir.clone(),
            direct: self.direct == Direct::On,
            drop_caches: self.drop_caches,
        }
    }
}
