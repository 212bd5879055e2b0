//! The journal of the multipart uploads a run starts, so that exactly those — and never
//! another writer's — are aborted when the run fails, is interrupted or is killed.
//!
//! Every process of a checkpoint run appends to its own file in a state folder keyed by the
//! endpoint, the bucket and the checkpoint folder ([`state_dir`]), whatever its `--output`:
//! one line when an upload is created, before its first part (`{"open":…}`), one when it
//! completes or is aborted (`{"done":…}`). The file is locked (`flock`) while its process
//! lives and removed when the run ends with nothing open. The next run against the same
//! endpoint, bucket and folder [`claim`]s every file whose lock it can take — a process that
//! died, however it died — aborts the uploads still open in them, and removes them; a live
//! writer's file stays locked, so its uploads are left alone.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use rustix::fs::{FlockOperation, flock};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Overrides where state folders live (else `$XDG_STATE_HOME/ringload`, else
/// `~/.local/state/ringload`).
pub const STATE_DIR_ENV: &str = "RINGLOAD_STATE_DIR";

/// An upload, as journaled.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Upload {
    pub key: String,
    pub upload_id: String,
}

/// One line of a journal.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Line {
    /// Created, before its first part; `at`: seconds since the epoch.
    Open {
        #[serde(flatten)]
        upload: Upload,
        at: u64,
    },
    /// Completed or aborted.
    Done {
        #[serde(flatten)]
        upload: Upload,
    },
}

/// The folder of the journals of runs against `endpoints` (as the target prints them),
/// `bucket` and the checkpoint folder `prefix`: `<state>/uploads/<16 hex digits>`, with a
/// `target.txt` naming the three for a reader.
pub fn state_dir(endpoints: &str, bucket: &str, prefix: &str) -> PathBuf {
    let digest = Sha256::digest(format!("{endpoints}\n{bucket}\n{prefix}").as_bytes());
    let slug: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    state_root().join("uploads").join(slug)
}

fn state_root() -> PathBuf {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var(STATE_DIR_ENV) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = var("XDG_STATE_HOME") {
        return PathBuf::from(dir).join("ringload");
    }
    match var("HOME") {
        Some(home) => PathBuf::from(home).join(".local/state/ringload"),
        None => std::env::temp_dir().join("ringload-state"),
    }
}

/// A process's journal; clones share it (one per process, every rank writes to it).
#[derive(Debug, Clone, Default)]
pub struct UploadJournal {
    /// `None`: journaling is off (the embedded server, whose uploads end with it).
    file: Option<Arc<Mutex<JournalFile>>>,
}

#[derive(Debug)]
struct JournalFile {
    path: PathBuf,
    file: File,
    open: BTreeSet<Upload>,
}

impl UploadJournal {
    /// A new journal file in `dir` (made if missing), locked for this process's life;
    /// `target` is written beside it for a reader (no secret in it).
    pub fn create(dir: &Path, target: &str) -> io::Result<UploadJournal> {
        std::fs::create_dir_all(dir)?;
        let described = dir.join("target.txt");
        if !described.exists() {
            std::fs::write(&described, format!("{target}\n"))?;
        }
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = dir.join(format!("{}-{nanos}.jsonl", std::process::id()));
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)?;
        flock(&file, FlockOperation::NonBlockingLockExclusive)?;
        Ok(UploadJournal {
            file: Some(Arc::new(Mutex::new(JournalFile {
                path,
                file,
                open: BTreeSet::new(),
            }))),
        })
    }

    /// Journaling off.
    pub fn off() -> UploadJournal {
        UploadJournal::default()
    }

    /// The journal's file, when there is one.
    pub fn path(&self) -> Option<PathBuf> {
        let file = self.file.as_ref()?;
        Some(lock(file).path.clone())
    }

    /// Records `upload` as created: call it before its first part. `Err`: it could not be
    /// written, and the upload should not go on.
    pub fn opened(&self, key: &str, upload_id: &str) -> io::Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let upload = Upload {
            key: key.to_string(),
            upload_id: upload_id.to_string(),
        };
        let at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut f = lock(file);
        f.write(&Line::Open {
            upload: upload.clone(),
            at,
        })?;
        f.open.insert(upload);
        Ok(())
    }

    /// Records `upload` as completed or aborted (best effort: a line that cannot be written
    /// leaves the upload to the next run's abort, which finds it gone).
    pub fn done(&self, key: &str, upload_id: &str) {
        let Some(file) = &self.file else { return };
        let upload = Upload {
            key: key.to_string(),
            upload_id: upload_id.to_string(),
        };
        let mut f = lock(file);
        if f.open.remove(&upload) {
            let _ = f.write(&Line::Done { upload });
        }
    }

    /// The uploads journaled open and not yet done.
    pub fn open_uploads(&self) -> Vec<Upload> {
        self.file
            .as_ref()
            .map(|f| lock(f).open.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Ends this handle; the last one's end removes the file when nothing is open in it
    /// (kept, for the next run, otherwise).
    pub fn close(self) {}
}

impl Drop for JournalFile {
    fn drop(&mut self) {
        if self.open.is_empty() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn lock(file: &Mutex<JournalFile>) -> std::sync::MutexGuard<'_, JournalFile> {
    file.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl JournalFile {
    fn write(&mut self, line: &Line) -> io::Result<()> {
        let mut text = serde_json::to_string(line).map_err(io::Error::other)?;
        text.push('\n');
        // One write per line, appended: a process killed mid-run leaves whole lines.
        self.file.write_all(text.as_bytes())
    }
}

/// Journals of processes that are gone, claimed: the uploads they left open.
#[derive(Debug, Default)]
pub struct Claimed {
    pub uploads: Vec<Upload>,
    /// The claimed files, locked by this process until [`Claimed::finish`].
    files: Vec<(PathBuf, File)>,
}

impl Claimed {
    /// The claimed files removed: call it once their uploads are aborted, or journaled again
    /// by this process (those whose abort failed, for the run after this one).
    pub fn finish(self) {
        for (path, _file) in self.files {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Claims every journal in `dir` whose lock can be taken (its process is gone), skipping
/// `own` (this process's journal): the uploads left open in them. A missing folder claims
/// nothing; a line that cannot be read is skipped (a process killed mid-write).
pub fn claim(dir: &Path, own: Option<&Path>) -> io::Result<Claimed> {
    let mut claimed = Claimed::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(claimed),
        Err(e) => return Err(e),
    };
    let mut open = BTreeSet::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "jsonl") || Some(path.as_path()) == own {
            continue;
        }
        let Ok(file) = OpenOptions::new().read(true).append(true).open(&path) else {
            continue;
        };
        if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            // A live writer's journal.
            continue;
        }
        let text = std::fs::read_to_string(&path)?;
        for line in text.lines() {
            match serde_json::from_str::<Line>(line) {
                Ok(Line::Open { upload, .. }) => {
                    open.insert(upload);
                }
                Ok(Line::Done { upload }) => {
                    open.remove(&upload);
                }
                Err(_) => {}
            }
        }
        claimed.files.push((path, file));
    }
    claimed.uploads = open.into_iter().collect();
    Ok(claimed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_writers_open_uploads_are_claimed_and_a_live_ones_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let dead = UploadJournal::create(dir.path(), "http://h b p/").unwrap();
        dead.opened("p/a", "1").unwrap();
        dead.opened("p/b", "2").unwrap();
        dead.opened("p/c", "3").unwrap();
        dead.done("p/b", "2");
        assert_eq!(dead.open_uploads().len(), 2);
        let dead_path = dead.path().unwrap();
        // A live writer (its lock held, here by this process's other journal).
        let live = UploadJournal::create(dir.path(), "x").unwrap();
        live.opened("p/live", "9").unwrap();
        // flock is per open file: a second open of the dead journal takes its lock only once
        // the first is closed, as when its process dies.
        drop(dead);
        let claimed = claim(dir.path(), None).unwrap();
        let keys: Vec<&str> = claimed.uploads.iter().map(|u| u.key.as_str()).collect();
        assert_eq!(keys, ["p/a", "p/c"]);
        assert!(dead_path.exists());
        claimed.finish();
        assert!(!dead_path.exists());
        assert!(live.path().unwrap().exists());
        // The live journal: kept while an upload is open, removed when none is.
        live.done("p/live", "9");
        let live_path = live.path().unwrap();
        live.close();
        assert!(!live_path.exists());
        assert!(
            claim(&dir.path().join("none"), None)
                .unwrap()
                .uploads
                .is_empty()
        );
    }

    #[test]
    fn state_folders_are_keyed_by_endpoint_bucket_and_folder() {
        let a = state_dir("http://h:9000", "b", "ck/");
        assert_eq!(a, state_dir("http://h:9000", "b", "ck/"));
        assert_ne!(a, state_dir("http://h:9000", "b", ""));
        assert_ne!(a, state_dir("http://h:9000", "c", "ck/"));
        assert_ne!(a, state_dir("http://h:9001", "b", "ck/"));
        assert!(a.to_string_lossy().contains("uploads/"));
    }
}
