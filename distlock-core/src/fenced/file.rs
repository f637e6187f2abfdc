//! [`FileStore`]: fenced files on one host.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;

use super::{FenceCheck, FencedStore, FencedValue};
use crate::error::{Error, ErrorKind, Result};
use crate::key::LockKey;
use crate::token::FencingToken;

/// Resources as files in one directory of a local file system, each written whole
/// (to a temporary file, synced, then renamed over the old one), with its fence kept
/// beside it.
///
/// For a resource named `r` the directory holds `r.value`, `r.fence` (the fence in
/// decimal) and `r.lock`, whose exclusive lock (`flock`) makes each step atomic
/// across the processes of the host. The name is escaped: every byte other than an
/// ASCII letter, digit, `-` or `_` becomes `%XX`, and escaped names longer than 200
/// bytes are split into subdirectories of 200 bytes, so any resource name fits any
/// file system's name limit.
///
/// A step writes the fence before the value, each by rename, and syncs both and the
/// directory, so that a crash between the two leaves the fence raised over the old
/// value rather than a value under a lower fence (this order is by construction; no
/// test crashes the host). The conformance suite runs with several stores at once in
/// one process, each step opening the lock file anew, so that the locks, not shared
/// memory, keep the steps apart; it is not run across processes. The store is for one
/// host: advisory locks over a network file system are not to be trusted, and are not
/// tested.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: Arc<Path>,
}

/// The longest escaped component, in bytes; file systems allow 255.
const COMPONENT: usize = 200;

impl FileStore {
    /// A store in `dir`, created (with its parents) on first write.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FileStore {
            dir: Arc::from(dir.into()),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where `resource`'s value is kept: the file to read it from.
    pub fn value_path(&self, resource: &LockKey) -> PathBuf {
        self.files(resource).value
    }

    fn files(&self, resource: &LockKey) -> Files {
        let mut escaped = String::with_capacity(resource.as_str().len());
        for b in resource.as_str().bytes() {
            if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
                escaped.push(char::from(b));
            } else {
                escaped.push_str(&format!("%{b:02X}"));
            }
        }
        let mut path = self.dir.to_path_buf();
        let mut rest = escaped.as_str();
        while rest.len() > COMPONENT {
            // The escaped name is ASCII, so any byte index is a boundary.
            let (head, tail) = rest.split_at(COMPONENT);
            path.push(head);
            rest = tail;
        }
        let with = |suffix: &str| path.join(format!("{rest}.{suffix}"));
        Files {
            value: with("value"),
            fence: with("fence"),
            lock: with("lock"),
        }
    }

    async fn blocking<T: Send + 'static>(
        &self,
        resource: &LockKey,
        step: impl FnOnce(&Files) -> io::Result<T> + Send + 'static,
    ) -> Result<T> {
        let files = self.files(resource);
        let shown = resource.clone();
        tokio::task::spawn_blocking(move || step(&files))
            .await
            .map_err(|e| {
                Error::new(ErrorKind::Backend, "a file step did not finish").with_source(e)
            })?
            .map_err(|e| {
                Error::new(
                    ErrorKind::Backend,
                    format!("cannot use the files of {shown:?}"),
                )
                .with_source(e)
                .with_backend("file")
            })
    }
}

struct Files {
    value: PathBuf,
    fence: PathBuf,
    lock: PathBuf,
}

impl Files {
    /// Takes the resource's lock file, exclusive or shared, creating what is missing.
    fn lock(&self, exclusive: bool) -> io::Result<File> {
        if let Some(parent) = self.lock.parent() {
            fs::create_dir_all(parent)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock)?;
        if exclusive {
            file.lock()?;
        } else {
            file.lock_shared()?;
        }
        Ok(file)
    }

    fn fence(&self) -> io::Result<Option<FencingToken>> {
        match fs::read_to_string(&self.fence) {
            Ok(text) => text
                .trim()
                .parse::<u64>()
                .map(|f| Some(FencingToken::new(f)))
                .map_err(|_| {
                    io::Error::new(io::ErrorKind::InvalidData, "the fence file is not a number")
                }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn value(&self) -> io::Result<Option<Vec<u8>>> {
        match fs::read(&self.value) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Under the exclusive lock: compares, stores the fence when it rose, then runs
    /// `then` (still under the lock). The fence is written before any value.
    fn step<T>(
        &self,
        fence: FencingToken,
        then: impl FnOnce(&Files) -> io::Result<T>,
    ) -> io::Result<FenceCheck<T>> {
        let _lock = self.lock(true)?;
        let current = self.fence()?;
        if let Some(current) = current.filter(|&c| fence < c) {
            return Ok(FenceCheck::Stale { current });
        }
        if current != Some(fence) {
            replace(&self.fence, format!("{fence}\n").as_bytes())?;
        }
        then(self).map(FenceCheck::Accepted)
    }
}

/// Writes `bytes` to a temporary file beside `path`, syncs it, renames it over `path`
/// and syncs the directory.
fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[async_trait]
impl FencedStore for FileStore {
    fn name(&self) -> &str {
        "file"
    }

    async fn put_fenced(
        &self,
        resource: &LockKey,
        fence: FencingToken,
        value: &[u8],
    ) -> Result<FenceCheck<()>> {
        let value = value.to_vec();
        self.blocking(resource, move |files| {
            files.step(fence, |files| replace(&files.value, &value))
        })
        .await
    }

    async fn claim_fenced(
        &self,
        resource: &LockKey,
        fence: FencingToken,
    ) -> Result<FenceCheck<Option<Vec<u8>>>> {
        self.blocking(resource, move |files| files.step(fence, Files::value))
            .await
    }

    async fn inspect_fenced(&self, resource: &LockKey) -> Result<Option<FencedValue>> {
        self.blocking(resource, |files| {
            if !files.lock.exists() {
                return Ok(None);
            }
            let _lock = files.lock(false)?;
            match files.fence()? {
                Some(fence) => Ok(Some(FencedValue {
                    fence,
                    value: files.value()?,
                })),
                None => Ok(None),
            }
        })
        .await
    }
}
