//! A checkpoint run's clean-up before the clock, which touches only its own uploads: the
//! journals earlier runs left against the same endpoint, bucket and folder
//! ([`crate::rank::journal`]) are claimed and exactly their open uploads aborted; the uploads
//! open under the folder that no journal names — another writer's — are named in one line and
//! left alone, unless `--abort-foreign-uploads`. A failed abort is a warning naming the
//! upload (journaled again, for the next run), never a refusal of the run; keys outside the
//! folder in the server's answer are ignored; a folder at the bucket's root works.
//!
//! Every process claims its own host's journals; process 0 lists the folder and speaks.

use serde::{Deserialize, Serialize};

use crate::cluster::Cluster;
use crate::exit::UsageError;
use crate::rank::journal::{self, Upload, UploadJournal};
use crate::s3::{self, Client};

/// What the clean-up did.
#[derive(Debug, Default)]
pub struct CleanedUp {
    /// This process's journal, for the run's uploads (off with the embedded server).
    pub journal: UploadJournal,
    /// Uploads of earlier runs aborted, over every process.
    pub aborted: usize,
}

/// One process's part of the clean-up, as it travels to process 0.
#[derive(Debug, Default, Serialize, Deserialize)]
struct ProcessCleanup {
    aborted: usize,
    warnings: Vec<String>,
    /// Uploads its journals named, aborted or not: never foreign.
    journaled: Vec<Upload>,
}

/// What to clean where.
pub struct Where<'a> {
    pub client: &'a Client,
    pub runtime: &'a tokio::runtime::Runtime,
    /// The checkpoint folder's key prefix (empty: the bucket's root).
    pub prefix: &'a str,
    /// The run's own server runs in this process: its uploads end with it, nothing to keep.
    pub embedded: bool,
    pub abort_foreign: bool,
}

/// Cleans up (see the module docs) and opens this process's journal.
pub fn clean_up(
    cluster: &Cluster,
    place: &Where<'_>,
    notes: &mut Vec<String>,
) -> anyhow::Result<CleanedUp> {
    if place.embedded {
        return Ok(CleanedUp {
            journal: UploadJournal::off(),
            aborted: 0,
        });
    }
    let target = place.client.target();
    let endpoints = target.endpoints_text();
    let dir = journal::state_dir(&endpoints, &target.bucket, place.prefix);
    let described = format!("{endpoints} s3://{}/{}", target.bucket, place.prefix);
    let journal = UploadJournal::create(&dir, &described).map_err(|e| {
        UsageError(format!(
            "cannot write the upload journal in {}: {e}; set {} to a writable folder",
            dir.display(),
            journal::STATE_DIR_ENV
        ))
    })?;
    let mine = abort_journaled(place, &dir, &journal);
    let lead = cluster.process() == 0;
    let all: Vec<ProcessCleanup> = match cluster.gather(&serde_json::to_vec(&mine)?) {
        Some(parts) => parts
            .iter()
            .filter_map(|p| serde_json::from_slice(p).ok())
            .collect(),
        None if cluster.is_single() => vec![mine],
        None => Vec::new(),
    };
    let aborted = all.iter().map(|p| p.aborted).sum::<usize>();
    if lead {
        let say = |line: String, notes: &mut Vec<String>| {
            eprintln!("ringload run: {line}");
            notes.push(line);
        };
        // Kept with the run's notes (the summary), not printed: one more line on every run.
        notes.push(format!(
            "upload journal: {} (uploads journaled there and left open are aborted by the next \
             run against this endpoint, bucket and folder)",
            dir.display()
        ));
        for warning in all.iter().flat_map(|p| &p.warnings) {
            say(format!("WARNING: {warning}"), notes);
        }
        if aborted > 0 {
            say(
                format!(
                    "aborted {} that an earlier run left under {} (killed or failed before it \
                     could abort them; its journal names them)",
                    crate::units::counted(aborted as u64, "incomplete multipart upload"),
                    shown(place.prefix)
                ),
                notes,
            );
        }
        let journaled: Vec<&Upload> = all.iter().flat_map(|p| &p.journaled).collect();
        if let Some(line) = foreign_uploads(place, &journaled) {
            say(line, notes);
        }
    }
    Ok(CleanedUp { journal, aborted })
}

/// Claims this host's journals in `dir` and aborts the uploads they left open; those whose
/// abort fails are journaled again in `journal`.
fn abort_journaled(
    place: &Where<'_>,
    dir: &std::path::Path,
    journal: &UploadJournal,
) -> ProcessCleanup {
    let mut done = ProcessCleanup::default();
    let claimed = match journal::claim(dir, journal.path().as_deref()) {
        Ok(claimed) => claimed,
        Err(e) => {
            done.warnings.push(format!(
                "cannot read the upload journals in {}: {e}; uploads earlier runs left open \
                 there are not aborted",
                dir.display()
            ));
            return done;
        }
    };
    for upload in &claimed.uploads {
        let aborted = place
            .runtime
            .block_on(place.client.abort_multipart(&upload.key, &upload.upload_id));
        match aborted {
            Ok(()) => done.aborted += 1,
            // Completed or aborted since: nothing left to do.
            Err(s3::RequestError::Status { status: 404, .. }) => {}
            Err(e) => {
                done.warnings.push(format!(
                    "could not abort upload {} of {}: {e}; the next run tries again",
                    upload.upload_id, upload.key
                ));
                if journal.opened(&upload.key, &upload.upload_id).is_err() {
                    done.warnings.push(format!(
                        "and could not journal it again: abort upload {} of {} by hand",
                        upload.upload_id, upload.key
                    ));
                }
            }
        }
    }
    done.journaled = claimed.uploads.clone();
    claimed.finish();
    done
}

/// The uploads open under the folder that no journal named: aborted with
/// `--abort-foreign-uploads`, else named and left alone; the line to say, if any.
fn foreign_uploads(place: &Where<'_>, journaled: &[&Upload]) -> Option<String> {
    let listed = match place
        .runtime
        .block_on(place.client.list_uploads(place.prefix))
    {
        Ok(listed) => listed,
        Err(e) => {
            return Some(format!(
                "WARNING: cannot list the multipart uploads open under {} ({e}); other \
                 writers' uploads there are not named",
                shown(place.prefix)
            ));
        }
    };
    let foreign: Vec<_> = listed
        .into_iter()
        // A server that ignores the prefix answers with keys outside it: not this folder's.
        .filter(|u| u.key.starts_with(place.prefix))
        .filter(|u| {
            !journaled
                .iter()
                .any(|j| j.key == u.key && j.upload_id == u.upload_id)
        })
        .collect();
    if foreign.is_empty() {
        return None;
    }
    let named: Vec<String> = foreign
        .iter()
        .take(3)
        .map(|u| format!("{} ({})", u.key, u.upload_id))
        .collect();
    let more = if foreign.len() > 3 { ", …" } else { "" };
    let count = crate::units::counted(foreign.len() as u64, "multipart upload");
    if !place.abort_foreign {
        return Some(format!(
            "{count} open under {} that ringload did not start (another writer's, or one \
             journaled in another state folder) left alone: {}{more}; --abort-foreign-uploads \
             aborts them",
            shown(place.prefix),
            named.join(", ")
        ));
    }
    let failed: Vec<String> = foreign
        .iter()
        .filter(|u| {
            place
                .runtime
                .block_on(place.client.abort_multipart(&u.key, &u.upload_id))
                .is_err()
        })
        .map(|u| format!("{} ({})", u.key, u.upload_id))
        .collect();
    Some(if failed.is_empty() {
        format!(
            "aborted {count} open under {} that ringload did not start \
             (--abort-foreign-uploads)",
            shown(place.prefix)
        )
    } else {
        format!(
            "WARNING: --abort-foreign-uploads: {} of {count} under {} could not be aborted: {}",
            failed.len(),
            shown(place.prefix),
            failed.join(", ")
        )
    })
}

/// A prefix as a reader knows it.
fn shown(prefix: &str) -> String {
    if prefix.is_empty() {
        "the bucket's root".to_string()
    } else {
        prefix.to_string()
    }
}
