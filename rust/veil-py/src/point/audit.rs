//! Audit lines of the statements answered natively, as `veil.audit.log` writes them.
//!
//! The session pre-renders each kept statement's line around the parts that
//! change from run to run (`veil.serve.native`): who, the statement's shape,
//! the tables and columns it decrypts. A native run adds when it started, its
//! rows and how long it took, and appends the line as the audit log does: one
//! `write()` on a descriptor opened with `O_APPEND`, under an exclusive `flock`
//! of the file (its own open file, so it excludes the session's writers too),
//! after ending a partial last line a writer that died left.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use super::values;

/// The client directory's `audit.jsonl`, opened for appending (again once it was moved
/// away: an operator rotates it as any log, docs/ops.md).
pub struct AuditFile {
    path: PathBuf,
    file: Mutex<File>,
}

fn opened(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .append(true)
        .read(true)
        .create(true)
        .mode(0o600)
        .open(path)
}

/// Whether `path` no longer names `file` (moved away or removed).
fn moved(path: &Path, file: &File) -> bool {
    match (std::fs::metadata(path), file.metadata()) {
        (Ok(named), Ok(held)) => (named.ino(), named.dev()) != (held.ino(), held.dev()),
        _ => true,
    }
}

impl AuditFile {
    pub fn open(path: &str) -> std::io::Result<Self> {
        let path = PathBuf::from(path);
        let file = Mutex::new(opened(&path)?);
        Ok(AuditFile { path, file })
    }

    /// Append `line` whole. A failure (a full disk) must not fail the statement that
    /// was answered: the line is lost, as the session's own sink only logs it.
    fn append(&self, line: &[u8]) {
        let mut file = self.file.lock().unwrap();
        if moved(&self.path, &file) {
            match opened(&self.path) {
                Ok(again) => *file = again,
                Err(_) => return,
            }
        }
        let file = &*file;
        let fd = file.as_raw_fd();
        // SAFETY: `fd` is this file's open descriptor for the whole call
        if unsafe { libc::flock(fd, libc::LOCK_EX) } != 0 {
            return;
        }
        let mut whole = Vec::with_capacity(line.len() + 1);
        if let Ok(meta) = file.metadata() {
            let mut last = [0u8];
            let size = meta.len();
            if size > 0 && file.read_exact_at(&mut last, size - 1).is_ok() && last[0] != b'\n' {
                whole.push(b'\n'); // a writer died mid-line: that line stays apart
            }
        }
        whole.extend_from_slice(line);
        let _ = (&*file).write_all(&whole);
        // SAFETY: as above
        unsafe { libc::flock(fd, libc::LOCK_UN) };
    }
}

/// One kept statement's line: the JSON between `"time"` and `"rows"` (`head`, from its
/// first comma) and between `"rows"` and `"seconds"` (`tail`).
pub struct AuditLine {
    pub head: Vec<u8>,
    pub tail: Vec<u8>,
}

impl AuditLine {
    /// Append the line of a run that started at `started`, took `seconds` and answered
    /// `rows` rows (or changed that many).
    pub fn record(&self, file: &AuditFile, started: SystemTime, seconds: f64, rows: usize) {
        let since = started.duration_since(UNIX_EPOCH).unwrap_or_default();
        let (secs, millis) = (since.as_secs() as i64, since.subsec_millis());
        let mut line = Vec::with_capacity(self.head.len() + self.tail.len() + 96);
        line.extend_from_slice(b"{\"time\":\"");
        if values::write_date(secs.div_euclid(86_400), &mut line).is_none() {
            return;
        }
        let day = secs.rem_euclid(86_400);
        let (h, m, s) = (day / 3600, day / 60 % 60, day % 60);
        line.extend_from_slice(format!("T{h:02}:{m:02}:{s:02}.{millis:03}Z\"").as_bytes());
        line.extend_from_slice(&self.head);
        line.extend_from_slice(format!(",\"rows\":{rows}").as_bytes());
        line.extend_from_slice(&self.tail);
        line.extend_from_slice(format!(",\"seconds\":{seconds:.6},\"phases\":{{}}}}\n").as_bytes());
        file.append(&line);
    }
}
