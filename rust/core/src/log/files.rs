//! File plumbing of the log: creating, locking, reserving space, positioned
//! reads and writes, each failure named with its file.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::format::FILE_HEADER_LEN;
use crate::error::{Error, Result};

pub fn storage(path: &Path, action: &'static str, error: &std::io::Error) -> Error {
    Error::Storage {
        path: path.display().to_string(),
        action,
        message: error.to_string(),
        errno: error.raw_os_error(),
    }
}

/// A log file with its path, for error messages. `close` shuts the file
/// itself (not only the log's use of it); every call after that is an error.
pub struct LogFile {
    file: Option<File>,
    pub path: PathBuf,
}

/// The flags every log file is opened with: never follow a link somewhere
/// else (a log's files are its own), and never block in `open(2)` on a FIFO
/// put in a file's place (it is refused just after, as not a regular file).
fn open_flags() -> i32 {
    (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32
}

impl LogFile {
    /// Open `dir/name`; `create` makes it (mode 0600) when missing.
    pub fn open(dir: &Path, name: &str, write: bool, create: bool) -> Result<Self> {
        let path = dir.join(name);
        let file = OpenOptions::new()
            .read(true)
            .write(write)
            .create(create && write)
            .mode(0o600)
            .custom_flags(open_flags())
            .open(&path)
            .map_err(|e| match e.kind() {
                ErrorKind::NotFound => Error::LogNotFound {
                    path: dir.display().to_string(),
                },
                _ => storage(&path, "open", &e),
            })?;
        let regular = file
            .metadata()
            .map_err(|e| storage(&path, "stat", &e))?
            .file_type()
            .is_file();
        if !regular {
            return Err(Error::InvalidValue {
                path: path.display().to_string(),
                reason: "is not a regular file (a log's files are its own)".into(),
            });
        }
        // O_NONBLOCK has no effect on a regular file; cleared all the same,
        // so the descriptor behaves as any other.
        rustix::fs::fcntl_setfl(&file, rustix::fs::OFlags::empty())
            .map_err(|e| storage(&path, "open", &e.into()))?;
        Ok(Self {
            file: Some(file),
            path,
        })
    }

    /// A stand-in for a file that was closed.
    pub fn closed(path: PathBuf) -> Self {
        Self { file: None, path }
    }

    /// The open file, or why there is none.
    pub fn handle(&self) -> Result<&File> {
        self.file.as_ref().ok_or(Error::LogClosed {
            reason: "the message log is closed",
        })
    }

    pub fn name(&self) -> String {
        self.path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    }

    pub fn len(&self) -> Result<u64> {
        self.handle()?
            .metadata()
            .map(|m| m.len())
            .map_err(|e| storage(&self.path, "stat", &e))
    }

    /// Exactly `buf.len()` bytes at `offset`, or a corruption error when the
    /// file ends first.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.handle()?.read_exact_at(buf, offset).map_err(|e| {
            if e.kind() == ErrorKind::UnexpectedEof {
                Error::LogCorrupt {
                    file: self.name(),
                    offset,
                    reason: format!("file ends before the {} bytes expected here", buf.len()),
                }
            } else {
                storage(&self.path, "read", &e)
            }
        })
    }

    /// Up to `buf.len()` bytes at `offset`: how many there were.
    pub fn read_at_most(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let file = self.handle()?;
        let mut done = 0;
        while done < buf.len() {
            match file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(storage(&self.path, "read", &e)),
            }
        }
        Ok(done)
    }

    pub fn write_all_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.handle()?
            .write_all_at(buf, offset)
            .map_err(|e| storage(&self.path, "write", &e))
    }

    pub fn sync(&self) -> Result<()> {
        self.handle()?
            .sync_data()
            .map_err(|e| storage(&self.path, "sync", &e))
    }

    /// Grow the file to `len`, reserving the blocks (so a full disk fails
    /// here, before any record is half written).
    pub fn reserve(&self, len: u64) -> Result<()> {
        let current = self.len()?;
        if len <= current {
            return Ok(());
        }
        let file = self.handle()?;
        match rustix::fs::fallocate(
            file,
            rustix::fs::FallocateFlags::empty(),
            current,
            len - current,
        ) {
            Ok(()) => Ok(()),
            // A file system without fallocate: extend it (sparse) instead.
            Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::NOSYS) => file
                .set_len(len)
                .map_err(|e| storage(&self.path, "extend", &e)),
            Err(e) => Err(storage(&self.path, "reserve space in", &e.into())),
        }
    }
}

/// The next size of a file that must hold `needed` bytes: doubling, in
/// steps of at least `min_step` and at most 64 MiB.
pub fn grown_len(current: u64, needed: u64, min_step: u64) -> u64 {
    const MAX_STEP: u64 = 64 << 20;
    let step = current.clamp(min_step, MAX_STEP);
    let mut len = current.max(min_step);
    while len < needed {
        len += step;
    }
    len
}

/// Make the log directory (0700) if asked; refuse a path that is not one.
pub fn ensure_dir(dir: &Path, create: bool) -> Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(Error::InvalidValue {
            path: dir.display().to_string(),
            reason: "is not a directory (a message log is a directory)".into(),
        }),
        Err(e) if e.kind() == ErrorKind::NotFound && create => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| storage(dir, "create", &e)),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(Error::LogNotFound {
            path: dir.display().to_string(),
        }),
        Err(e) => Err(storage(dir, "stat", &e)),
    }
}

/// How long a writer waits for the lock at the least, whatever its
/// timeout: a reader that found bytes past the end holds a shared lock for
/// as long as it takes to look at them again, and must not make a writer's
/// open fail as if another writer held the log.
pub const READER_GRACE: Duration = Duration::from_millis(50);

/// Take the writer lock (`flock(LOCK_EX)` on `dir/lock`), retrying until
/// `timeout` (at least [`READER_GRACE`]).
pub fn lock_writer(dir: &Path, timeout: Duration) -> Result<File> {
    let deadline = Instant::now().checked_add(timeout.max(READER_GRACE));
    loop {
        let lock = LogFile::open(dir, "lock", true, true)?;
        let file = lock.handle()?;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock)
                    if deadline.is_none_or(|d| Instant::now() < d) =>
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(Error::LogLocked {
                        path: dir.display().to_string(),
                    });
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(storage(&lock.path, "lock", &e));
                }
            }
        }
        // While this waited, the writer before it may have removed the
        // directory (a session whose open failed takes back the directory
        // it made) or put a new lock file in place: a lock on a file no
        // longer at the path keeps out no one who opens the path now, and
        // two writers would append over each other. Locked again, at the
        // path as it is now (an error if the directory is gone).
        if is_at_path(file, &lock.path)? {
            return Ok(lock.file.expect("just opened"));
        }
    }
}

/// Whether `file` is the file now at `path` (not removed or replaced since it was opened).
fn is_at_path(file: &File, path: &Path) -> Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let held = file.metadata().map_err(|e| storage(path, "stat", &e))?;
    match std::fs::symlink_metadata(path) {
        Ok(now) => Ok(now.dev() == held.dev() && now.ino() == held.ino()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(storage(path, "stat", &e)),
    }
}

/// A shared hold on the writer lock (none to hold if no writer ever made
/// the lock file): while it lasts, no writer can start.
pub struct Hold {
    _lock: Option<File>,
}

/// A [`Hold`] if no writer has the log (`None` while one does): what lies
/// past its last record is then settled, not an append in flight. Readers
/// take it only to confirm damage they found, so a writer's open is not
/// held up in the ordinary case.
pub fn hold_if_no_writer(dir: &Path) -> Result<Option<Hold>> {
    let lock = match LogFile::open(dir, "lock", false, false) {
        Ok(lock) => lock,
        Err(Error::LogNotFound { .. }) => return Ok(Some(Hold { _lock: None })),
        Err(other) => return Err(other),
    };
    match lock.handle()?.try_lock_shared() {
        Ok(()) => Ok(Some(Hold { _lock: lock.file })),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(storage(&lock.path, "lock", &e)),
    }
}

/// The stretches of `file` at or after `from` that may hold bytes, as
/// `(start, end)`, skipping the holes the file system knows of (space
/// reserved by `fallocate` and never written reads as zeros and is one):
/// what follows a log's last record is read without reading the reserve.
pub fn data_regions(file: &LogFile, from: u64) -> Result<Vec<(u64, u64)>> {
    use rustix::fs::{SeekFrom, seek};
    let handle = file.handle()?;
    let len = file.len()?;
    let mut regions = Vec::new();
    let mut at = from;
    while at < len {
        let start = match seek(handle, SeekFrom::Data(at)) {
            Ok(start) => start,
            // Nothing but holes from here on.
            Err(rustix::io::Errno::NXIO) => break,
            // A file system without SEEK_DATA: everything may hold bytes.
            Err(_) => {
                regions.push((at, len));
                break;
            }
        };
        let end = match seek(handle, SeekFrom::Hole(start)) {
            Ok(end) => end.min(len),
            Err(_) => len,
        };
        if end <= start {
            break;
        }
        regions.push((start.max(from), end));
        at = end;
    }
    Ok(regions)
}

/// Whether the log in `dir` was never made whole, and is to be made anew:
/// it has no `index` (made last, see `create_files`), or an `index`
/// shorter than its header (which a kill could leave when this library
/// made `index` first). Either way nothing was ever acknowledged, so
/// `data` holds no record (a header at most): a `data` with more beside a
/// missing or cut `index` is damage, left for `repair`, which rebuilds the
/// index from it.
pub fn never_made_whole(dir: &Path) -> Result<bool> {
    let stat = |name: &str| -> Result<Option<std::fs::Metadata>> {
        let path = dir.join(name);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) => Ok(Some(meta)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(storage(&path, "stat", &e)),
        }
    };
    let header = FILE_HEADER_LEN as u64;
    // `data` first: `index` is renamed in before any record is written, so
    // a `data` seen with records had its `index` already (a reader that
    // looked at `index` first could see none, then the first record).
    let data = stat("data")?;
    // Anything but a regular file in a file's place is opened, and refused, as it is.
    let cut = stat("index")?.is_none_or(|m| m.is_file() && m.len() < header);
    match data {
        _ if !cut => Ok(false),
        None => Ok(true),
        Some(m) if !m.is_file() => Ok(false),
        Some(m) if m.len() <= header => Ok(true),
        Some(m) => Err(Error::LogCorrupt {
            file: "index".into(),
            offset: 0,
            reason: format!(
                "missing or cut short, beside {} bytes of data (repair rebuilds it from them)",
                m.len()
            ),
        }),
    }
}

/// Write `bytes` to `dir/name` atomically: a temporary file, synced, renamed
/// over the old one, and the directory synced when `durable`.
pub fn replace_file(dir: &Path, name: &str, bytes: &[u8], durable: bool) -> Result<()> {
    replace_files(dir, &[(name, bytes)], durable)
}

/// [`replace_file`] for several files: every temporary is written (and
/// synced) before the first rename, so a failure (a full disk) leaves the old
/// files all in place, and no temporary behind: one left would hold the
/// space a full disk lacks and fail the next try the same way.
pub fn replace_files(dir: &Path, files: &[(&str, &[u8])], durable: bool) -> Result<()> {
    let temporary = |name: &str| dir.join(format!("{name}.tmp"));
    let written = files
        .iter()
        .try_for_each(|&(name, bytes)| write_new(&temporary(name), bytes, durable));
    if let Err(error) = written {
        for &(name, _) in files {
            let _ = std::fs::remove_file(temporary(name));
        }
        return Err(error);
    }
    for &(name, _) in files {
        let target = dir.join(name);
        std::fs::rename(temporary(name), &target).map_err(|e| storage(&target, "replace", &e))?;
    }
    if durable {
        sync_dir(dir)?;
    }
    Ok(())
}

fn write_new(path: &Path, bytes: &[u8], durable: bool) -> Result<()> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(open_flags())
        .open(path)
        .map_err(|e| storage(path, "create", &e))?;
    file.write_all_at(bytes, 0)
        .map_err(|e| storage(path, "write", &e))?;
    if durable {
        file.sync_all().map_err(|e| storage(path, "sync", &e))?;
    }
    Ok(())
}

pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| storage(dir, "sync", &e))
}

#[cfg(test)]
mod tests {
    use super::grown_len;

    #[test]
    fn files_grow_by_doubling_in_bounded_steps() {
        assert_eq!(grown_len(0, 100, 65_536), 65_536);
        assert_eq!(grown_len(65_536, 65_600, 65_536), 131_072);
        assert_eq!(grown_len(1 << 20, (1 << 20) + 1, 65_536), 2 << 20);
        let big = 512u64 << 20;
        assert_eq!(grown_len(big, big + 1, 65_536), big + (64 << 20));
    }
}
