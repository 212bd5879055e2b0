//! The directory backend: buckets are the top-level folders of a root directory, object `a/b`
//! of bucket `x` is the file `ROOT/x/a/b`.
//!
//! Reads map the file (see [`super::mmap`]) so bodies go out without a user-space copy. Writes
//! go to a temporary file under `ROOT/.ringload-tmp/` and are renamed into place when the last
//! byte has arrived (and, for a signed payload, hashed correctly), so an interrupted upload never
//! leaves a half object under a key. Multipart uploads keep their parts under
//! `ROOT/.ringload-multipart/<upload id>/` until they are completed or aborted. Names that start
//! with `.` at the top level are not buckets (S3 bucket names cannot start with `.`).
//!
//! Metadata operations (stat, open, rename, listing a folder) run on the server's async worker
//! threads: a few system calls each. Upload bodies and the joining of parts, which move whole
//! objects, run on the blocking pool. A read of a file that is not in the page cache faults in
//! the worker that sends it; the virtual backend never touches a disk.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::StatusCode;

use super::error::{S3Error, from_io};
use super::mmap;
use super::object::{ObjectInfo, UploadInfo, tag_of};
use crate::s3::target::valid_bucket_name;
use crate::s3::xml::CompletedPart;

/// Where uploads are written before they are renamed into place.
const TMP_DIR: &str = ".ringload-tmp";
/// Where multipart uploads keep their parts.
const MULTIPART_DIR: &str = ".ringload-multipart";
/// S3's smallest part, except the last.
pub const MIN_PART_BYTES: u64 = 5 << 20;
/// S3's largest part number.
pub const MAX_PART_NUMBER: u32 = 10_000;

/// The directory backend.
#[derive(Debug)]
pub struct DirStore {
    root: PathBuf,
    /// The root with every symlink resolved: no object path may lead outside it.
    root_real: PathBuf,
    /// Makes temporary names unique within this process.
    next_temp: AtomicU64,
}

/// A file being uploaded: removed on drop unless it was committed.
#[derive(Debug)]
pub struct TempFile {
    pub file: File,
    path: PathBuf,
    committed: bool,
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// An object file opened for reading.
#[derive(Debug)]
pub struct OpenFile {
    pub info: ObjectInfo,
    file: File,
}

impl OpenFile {
    /// Bytes `first..=last`, mapped.
    pub fn map(&self, first: u64, last: u64) -> Result<Bytes, S3Error> {
        let len = usize::try_from(last + 1 - first)
            .map_err(|_| S3Error::internal("range larger than the address space"))?;
        mmap::map_range(&self.file, first, len)
            .map_err(|e| from_io(&e, &format!("mapping {}", self.info.key)))
    }
}

fn invalid_bucket(name: &str) -> S3Error {
    S3Error::new(
        StatusCode::BAD_REQUEST,
        "InvalidBucketName",
        format!(
            "'{name}' is not a valid bucket name: use 3-63 characters of a-z, 0-9, '.' and '-', \
             starting and ending with a letter or digit"
        ),
    )
    .with("BucketName", name)
}

/// A key a directory can hold: '/'-separated parts, none empty, `.` or `..`.
fn check_key(key: &str) -> Result<(), S3Error> {
    if key.len() > 1024 {
        return Err(S3Error::new(
            StatusCode::BAD_REQUEST,
            "KeyTooLongError",
            "Your key is too long (S3 allows 1024 bytes).",
        ));
    }
    if key.contains('\0')
        || key
            .split('/')
            .any(|p| p.is_empty() || p == "." || p == "..")
    {
        return Err(S3Error::invalid_argument(format!(
            "ringload serve --dir cannot store key '{key}': a directory backend needs keys whose \
             '/'-separated parts are non-empty and not '.' or '..'"
        )));
    }
    Ok(())
}

fn info_of(key: String, meta: &fs::Metadata) -> ObjectInfo {
    let mtime_ns = meta.mtime() as u64 * 1_000_000_000 + meta.mtime_nsec() as u64;
    ObjectInfo {
        key,
        size_bytes: meta.len(),
        etag: tag_of(&[meta.len(), mtime_ns, meta.ino(), meta.dev()]),
        last_modified: meta.modified().unwrap_or(UNIX_EPOCH),
    }
}

impl DirStore {
    /// Serves the buckets under `root`, which must be a directory.
    pub fn new(root: &Path) -> io::Result<DirStore> {
        let meta = fs::metadata(root)?;
        if !meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                "not a directory",
            ));
        }
        fs::create_dir_all(root.join(TMP_DIR))?;
        fs::create_dir_all(root.join(MULTIPART_DIR))?;
        Ok(DirStore {
            root: root.to_path_buf(),
            root_real: fs::canonicalize(root)?,
            next_temp: AtomicU64::new(0),
        })
    }

    pub fn describe(&self) -> String {
        format!("directory {}", self.root.display())
    }

    /// Top-level folders that are not served because their names are not bucket names.
    pub fn unserved_folders(&self) -> Vec<String> {
        let Ok(entries) = fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut out: Vec<String> = entries
            .flatten()
            .filter(|e| e.metadata().is_ok_and(|m| m.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|name| name != TMP_DIR && name != MULTIPART_DIR && !valid_bucket_name(name))
            .collect();
        out.sort();
        out
    }

    /// Whether `path` (under the root) stays inside the root once symlinks are resolved: its
    /// deepest existing ancestor (itself, if it exists) must. A symlink that leads out of the
    /// root is not followed, for reads or writes.
    fn inside_root(&self, path: &Path) -> bool {
        path.ancestors()
            .find(|p| fs::symlink_metadata(p).is_ok())
            .and_then(|p| fs::canonicalize(p).ok())
            .is_some_and(|real| real.starts_with(&self.root_real))
    }

    /// The path of an existing bucket.
    pub fn bucket_path(&self, bucket: &str) -> Result<PathBuf, S3Error> {
        if !valid_bucket_name(bucket) {
            return Err(S3Error::no_such_bucket(bucket));
        }
        let path = self.root.join(bucket);
        match fs::metadata(&path) {
            Ok(m) if m.is_dir() => Ok(path),
            _ => Err(S3Error::no_such_bucket(bucket)),
        }
    }

    pub fn buckets(&self) -> Result<Vec<(String, SystemTime)>, S3Error> {
        let entries = fs::read_dir(&self.root).map_err(|e| from_io(&e, "listing buckets"))?;
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let (Ok(name), Ok(meta)) = (entry.file_name().into_string(), entry.metadata()) else {
                continue;
            };
            if meta.is_dir() && valid_bucket_name(&name) {
                out.push((name, meta.modified().unwrap_or(UNIX_EPOCH)));
            }
        }
        out.sort();
        Ok(out)
    }

    pub fn create_bucket(&self, bucket: &str) -> Result<(), S3Error> {
        if !valid_bucket_name(bucket) {
            return Err(invalid_bucket(bucket));
        }
        match fs::create_dir(self.root.join(bucket)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(S3Error::new(
                StatusCode::CONFLICT,
                "BucketAlreadyOwnedByYou",
                "Your previous request to create the named bucket succeeded and you already own it.",
            )
            .with("BucketName", bucket)),
            Err(e) => Err(from_io(&e, &format!("creating bucket {bucket}"))),
        }
    }

    pub fn delete_bucket(&self, bucket: &str) -> Result<(), S3Error> {
        let path = self.bucket_path(bucket)?;
        match fs::remove_dir(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => Err(S3Error::new(
                StatusCode::CONFLICT,
                "BucketNotEmpty",
                "The bucket you tried to delete is not empty",
            )
            .with("BucketName", bucket)),
            Err(e) => Err(from_io(&e, &format!("deleting bucket {bucket}"))),
        }
    }

    /// Objects under `prefix`, sorted. Only the folder the prefix points into is walked.
    pub fn objects(&self, bucket: &str, prefix: &str) -> Result<Vec<ObjectInfo>, S3Error> {
        let bucket_path = self.bucket_path(bucket)?;
        // "a/b/c" → walk a/b/ (keys under it all start with "a/b/").
        let start = match prefix.rfind('/') {
            Some(i) => &prefix[..=i],
            None => "",
        };
        // No stored key lies under a folder part that is empty, `.` or `..` (and joining a
        // path that starts with `/` would leave the bucket).
        if !start.is_empty() && check_key(&start[..start.len() - 1]).is_err() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        let mut pending = vec![start.to_string()];
        while let Some(dir_key) = pending.pop() {
            let entries = match fs::read_dir(bucket_path.join(&dir_key)) {
                Ok(entries) => entries,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                    ) =>
                {
                    continue;
                }
                Err(e) => return Err(from_io(&e, &format!("listing {bucket}/{dir_key}"))),
            };
            for entry in entries.flatten() {
                let (Ok(name), Ok(meta)) = (entry.file_name().into_string(), entry.metadata())
                else {
                    continue;
                };
                let key = format!("{dir_key}{name}");
                // A symlink is listed as what it points to, if that stays inside the root.
                let meta = if meta.file_type().is_symlink() {
                    match fs::metadata(entry.path()) {
                        Ok(target) if self.inside_root(&entry.path()) => target,
                        _ => continue,
                    }
                } else {
                    meta
                };
                if meta.is_dir() {
                    let sub = format!("{key}/");
                    if sub.starts_with(prefix) || prefix.starts_with(&sub) {
                        pending.push(sub);
                    }
                } else if meta.is_file() && key.starts_with(prefix) {
                    out.push(info_of(key, &meta));
                }
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    /// Where `key` is written.
    fn object_path(&self, bucket: &str, key: &str) -> Result<PathBuf, S3Error> {
        let bucket_path = self.bucket_path(bucket)?;
        check_key(key)?;
        let path = bucket_path.join(key);
        if !self.inside_root(&path) {
            return Err(S3Error::access_denied(format!(
                "ringload serve --dir does not write '{key}': a symlink on its path leads \
                 outside --dir"
            )));
        }
        Ok(path)
    }

    pub fn open(&self, bucket: &str, key: &str) -> Result<OpenFile, S3Error> {
        let bucket_path = self.bucket_path(bucket)?;
        // A key this backend cannot store cannot exist in it.
        if check_key(key).is_err() {
            return Err(S3Error::no_such_key(key));
        }
        let path = bucket_path.join(key);
        if !self.inside_root(&path) {
            return Err(S3Error::no_such_key(key));
        }
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                return Err(S3Error::no_such_key(key));
            }
            Err(e) => return Err(from_io(&e, &format!("opening {bucket}/{key}"))),
        };
        let meta = file
            .metadata()
            .map_err(|e| from_io(&e, &format!("reading {bucket}/{key}")))?;
        if !meta.is_file() {
            return Err(S3Error::no_such_key(key));
        }
        Ok(OpenFile {
            info: info_of(key.to_string(), &meta),
            file,
        })
    }

    /// Deletes an object; a missing key is not an error (S3 answers 204 either way). Folders
    /// left empty are removed, up to the bucket.
    pub fn delete(&self, bucket: &str, key: &str) -> Result<(), S3Error> {
        let bucket_path = self.bucket_path(bucket)?;
        if check_key(key).is_err() {
            return Ok(());
        }
        let path = bucket_path.join(key);
        match fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() || m.file_type().is_symlink() => {}
            _ => return Ok(()),
        }
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(from_io(&e, &format!("deleting {bucket}/{key}"))),
        }
        let mut dir = path.parent();
        while let Some(d) = dir {
            if d == bucket_path || fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
        Ok(())
    }

    /// A new temporary file for an upload.
    pub fn temp_file(&self) -> Result<TempFile, S3Error> {
        let n = self.next_temp.fetch_add(1, Ordering::Relaxed);
        let path = self
            .root
            .join(TMP_DIR)
            .join(format!("upload-{}-{n}", std::process::id()));
        let file = File::create(&path).map_err(|e| from_io(&e, "creating an upload file"))?;
        Ok(TempFile {
            file,
            path,
            committed: false,
        })
    }

    /// Checks that `key` can be written in `bucket` before its body is read.
    pub fn check_writable(&self, bucket: &str, key: &str) -> Result<(), S3Error> {
        self.object_path(bucket, key).map(|_| ())
    }

    /// Moves a finished upload into place under `key`.
    pub fn commit(
        &self,
        mut temp: TempFile,
        bucket: &str,
        key: &str,
    ) -> Result<ObjectInfo, S3Error> {
        let path = self.object_path(bucket, key)?;
        let conflict = |e: io::Error| match e.kind() {
            io::ErrorKind::IsADirectory
            | io::ErrorKind::NotADirectory
            | io::ErrorKind::AlreadyExists
            | io::ErrorKind::DirectoryNotEmpty => S3Error::invalid_argument(format!(
                "ringload serve --dir cannot store key '{key}': it and another key would need \
                 the same name as both a file and a folder"
            )),
            _ => from_io(&e, &format!("storing {bucket}/{key}")),
        };
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(conflict)?;
        }
        temp.file
            .flush()
            .map_err(|e| from_io(&e, "finishing an upload"))?;
        fs::rename(&temp.path, &path).map_err(conflict)?;
        temp.committed = true;
        let meta = fs::metadata(&path).map_err(|e| from_io(&e, "reading a stored object"))?;
        Ok(info_of(key.to_string(), &meta))
    }

    fn upload_dir(&self, upload_id: &str, bucket: &str, key: &str) -> Result<PathBuf, S3Error> {
        if upload_id.is_empty() || !upload_id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(S3Error::no_such_upload(upload_id));
        }
        let dir = self.root.join(MULTIPART_DIR).join(upload_id);
        match fs::read_to_string(dir.join("target")) {
            Ok(target) if target == format!("{bucket}\n{key}") => Ok(dir),
            _ => Err(S3Error::no_such_upload(upload_id)),
        }
    }

    /// Starts a multipart upload; returns its id.
    pub fn create_multipart(&self, bucket: &str, key: &str) -> Result<String, S3Error> {
        self.check_writable(bucket, key)?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        let n = self.next_temp.fetch_add(1, Ordering::Relaxed);
        let id = tag_of(&[now, n, u64::from(std::process::id())]);
        let dir = self.root.join(MULTIPART_DIR).join(&id);
        fs::create_dir(&dir)
            .and_then(|()| fs::write(dir.join("target"), format!("{bucket}\n{key}")))
            .map_err(|e| from_io(&e, "starting a multipart upload"))?;
        Ok(id)
    }

    /// Checks that a part may be uploaded (before its body is read).
    pub fn check_part(
        &self,
        upload_id: &str,
        bucket: &str,
        key: &str,
        part_number: u32,
    ) -> Result<(), S3Error> {
        self.upload_dir(upload_id, bucket, key)?;
        if !(1..=MAX_PART_NUMBER).contains(&part_number) {
            return Err(S3Error::invalid_argument(format!(
                "Part number must be an integer between 1 and {MAX_PART_NUMBER}, inclusive"
            )));
        }
        Ok(())
    }

    /// Stores an uploaded part (replacing an earlier one of the same number); returns its ETag.
    pub fn commit_part(
        &self,
        mut temp: TempFile,
        upload_id: &str,
        bucket: &str,
        key: &str,
        part_number: u32,
    ) -> Result<String, S3Error> {
        let dir = self.upload_dir(upload_id, bucket, key)?;
        let path = dir.join(format!("part-{part_number:05}"));
        fs::rename(&temp.path, &path).map_err(|e| from_io(&e, "storing a part"))?;
        temp.committed = true;
        let meta = fs::metadata(&path).map_err(|e| from_io(&e, "reading a stored part"))?;
        Ok(info_of(String::new(), &meta).etag)
    }

    /// Joins the listed parts into the object, in order, and ends the upload.
    pub fn complete_multipart(
        &self,
        upload_id: &str,
        bucket: &str,
        key: &str,
        parts: &[CompletedPart],
    ) -> Result<ObjectInfo, S3Error> {
        let dir = self.upload_dir(upload_id, bucket, key)?;
        if parts.is_empty() {
            return Err(S3Error::malformed_xml("it lists no parts"));
        }
        if parts
            .windows(2)
            .any(|w| w[0].part_number >= w[1].part_number)
        {
            return Err(S3Error::new(
                StatusCode::BAD_REQUEST,
                "InvalidPartOrder",
                "The list of parts was not in ascending order. The parts list must be specified \
                 in order by part number.",
            ));
        }
        let mut files = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            let path = dir.join(format!("part-{:05}", part.part_number));
            let invalid_part = || {
                S3Error::new(
                    StatusCode::BAD_REQUEST,
                    "InvalidPart",
                    format!(
                        "One or more of the specified parts could not be found or its entity \
                         tag did not match: part {}",
                        part.part_number
                    ),
                )
            };
            let meta = fs::metadata(&path).map_err(|_| invalid_part())?;
            if info_of(String::new(), &meta).etag != part.etag {
                return Err(invalid_part());
            }
            if i + 1 < parts.len() && meta.len() < MIN_PART_BYTES {
                return Err(S3Error::new(
                    StatusCode::BAD_REQUEST,
                    "EntityTooSmall",
                    format!(
                        "Your proposed upload is smaller than the minimum allowed object size: \
                         part {} is {} bytes; every part but the last needs 5 MiB",
                        part.part_number,
                        meta.len()
                    ),
                ));
            }
            files.push(path);
        }
        let mut temp = self.temp_file()?;
        for path in &files {
            let mut part = File::open(path).map_err(|e| from_io(&e, "reading a part"))?;
            // std::io::copy uses copy_file_range between files: no user-space copy.
            io::copy(&mut part, &mut temp.file).map_err(|e| from_io(&e, "joining parts"))?;
        }
        let info = self.commit(temp, bucket, key)?;
        let _ = fs::remove_dir_all(&dir);
        Ok(info)
    }

    /// The uploads in progress in `bucket` whose keys start with `prefix`, by key and id;
    /// `Initiated` is when the upload's folder was made.
    pub fn uploads(&self, bucket: &str, prefix: &str) -> Result<Vec<UploadInfo>, S3Error> {
        self.bucket_path(bucket)?;
        let root = self.root.join(MULTIPART_DIR);
        let entries = fs::read_dir(&root).map_err(|e| from_io(&e, "listing uploads"))?;
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let Ok(upload_id) = entry.file_name().into_string() else {
                continue;
            };
            let Ok(target) = fs::read_to_string(entry.path().join("target")) else {
                continue;
            };
            match target.split_once('\n') {
                Some((b, key)) if b == bucket && key.starts_with(prefix) => {
                    let initiated = entry
                        .metadata()
                        .and_then(|m| m.modified())
                        .unwrap_or(UNIX_EPOCH);
                    out.push(UploadInfo {
                        key: key.to_string(),
                        upload_id,
                        initiated,
                    });
                }
                _ => {}
            }
        }
        out.sort_by(|a, b| (&a.key, &a.upload_id).cmp(&(&b.key, &b.upload_id)));
        Ok(out)
    }

    /// Ends an upload and drops its parts.
    pub fn abort_multipart(&self, upload_id: &str, bucket: &str, key: &str) -> Result<(), S3Error> {
        let dir = self.upload_dir(upload_id, bucket, key)?;
        fs::remove_dir_all(&dir).map_err(|e| from_io(&e, "aborting an upload"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_names_follow_s3_rules() {
        for good in ["abc", "my-bucket.1", "a1b"] {
            assert!(valid_bucket_name(good), "{good}");
        }
        for bad in [
            "ab",
            "ABC",
            "-abc",
            "abc-",
            ".abc",
            "a..b",
            "a_b",
            &"x".repeat(64),
        ] {
            assert!(!valid_bucket_name(bad), "{bad}");
        }
    }

    #[test]
    fn keys_must_map_to_paths() {
        assert!(check_key("a/b/c.parquet").is_ok());
        for bad in ["a//b", "a/", "../x", "a/./b", "/a"] {
            assert!(check_key(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn put_list_delete_and_an_interrupted_upload_leaves_nothing() {
        let root = tempfile::tempdir().unwrap();
        let store = DirStore::new(root.path()).unwrap();
        store.create_bucket("bkt").unwrap();
        assert_eq!(
            store.create_bucket("bkt").unwrap_err().code,
            "BucketAlreadyOwnedByYou"
        );
        for key in ["a/1", "a/2", "b"] {
            let mut t = store.temp_file().unwrap();
            t.file.write_all(key.as_bytes()).unwrap();
            store.commit(t, "bkt", key).unwrap();
        }
        {
            let mut t = store.temp_file().unwrap();
            t.file.write_all(b"half").unwrap();
            // dropped without commit: an interrupted upload
        }
        let keys = |p| {
            store
                .objects("bkt", p)
                .unwrap()
                .into_iter()
                .map(|o| o.key)
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(""), ["a/1", "a/2", "b"]);
        assert_eq!(keys("a/"), ["a/1", "a/2"]);
        assert_eq!(keys("a/2"), ["a/2"]);
        for outside in ["/", "/etc/", "../", "a/../", "a//"] {
            assert!(keys(outside).is_empty(), "{outside}");
        }
        assert!(
            fs::read_dir(root.path().join(TMP_DIR))
                .unwrap()
                .next()
                .is_none()
        );
        let f = store.open("bkt", "a/2").unwrap();
        assert_eq!(&f.map(0, 2).unwrap()[..], b"a/2");
        store.delete("bkt", "a/1").unwrap();
        store.delete("bkt", "a/2").unwrap();
        store.delete("bkt", "missing").unwrap();
        assert!(!root.path().join("bkt/a").exists(), "empty folder removed");
        assert_eq!(
            store.delete_bucket("bkt").unwrap_err().code,
            "BucketNotEmpty"
        );
        assert_eq!(
            store.buckets().unwrap().len(),
            1,
            "hidden folders are not buckets"
        );
    }
}
