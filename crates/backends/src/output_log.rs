//! The instruments' output logs (`{workspace}/logs/sheet-NN.stdout.log` / `.stderr.log`):
//! private to their owner — files 0600 in a 0700 directory, whatever the umask — and
//! redacted like everything else Mozart keeps (issue 21). Other users on the machine read
//! neither the prompts' answers nor a key an instrument printed.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::LazyLock;

use crate::redact::redact_owned;

/// Longest run without a line end written as it comes; a longer one is redacted and written
/// in pieces of this size (a secret cut by such a piece boundary may be missed: output that
/// long without a newline is not text a person reads).
const MAX_PENDING: usize = 64 * 1024;

/// Longest stretch held back while a PEM private key block is still open, so the whole
/// block is redacted at once.
const MAX_HELD_KEY: usize = 256 * 1024;

/// Create `dir` (and its missing parents) and make it 0700: the directory of the logs. An
/// existing directory (a workspace from an older Mozart) is restricted too.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    // Every attempt asks, and from its second sheet on a job's logs directory is there and
    // already private: one `stat` says so (creating it first costs a `mkdir` and another
    // `stat`: issue 24's fan-out paid them per sheet).
    let meta = match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => meta,
        _ => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
            std::fs::metadata(dir)?
        }
    };
    if meta.permissions().mode() & 0o777 != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Create (or truncate) `path` as a file only its owner can read and write: 0600 even when
/// it existed with wider permissions.
pub fn create_private(path: &Path) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    if file.metadata()?.permissions().mode() & 0o777 != 0o600 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(file)
}

/// Write `text` redacted to a new private file at `path` (a log written in one piece).
pub fn write_redacted(path: &Path, text: &str) -> io::Result<()> {
    let mut file = create_private(path)?;
    file.write_all(redact_owned(text.to_string()).as_bytes())
}

/// Copy `from` into a new private file at `to`, redacted on the way (an output file a remote
/// attempt left behind).
pub fn copy_redacted(from: &Path, to: &Path) -> io::Result<()> {
    let mut src = File::open(from)?;
    let mut log = RedactingLog::new(create_private(to)?);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match src.read(&mut buf)? {
            0 => break,
            n => log.write(&buf[..n])?,
        }
    }
    log.finish()
}

/// A log file written as output arrives, redacted line by line: each complete line is
/// redacted before it is written (a secret never reaches the disk), the unfinished rest waits
/// for its line end. Dropping it writes what is left.
#[derive(Debug)]
pub struct RedactingLog {
    file: Option<File>,
    pending: Vec<u8>,
}

static KEY_ARMOUR: LazyLock<regex::bytes::Regex> = LazyLock::new(|| {
    regex::bytes::Regex::new(r"-----(BEGIN|END) [A-Z0-9 ]*PRIVATE KEY-----")
        .unwrap_or_else(|err| panic!("built-in pattern does not compile: {err}"))
});

impl RedactingLog {
    /// Write through to `file`.
    pub fn new(file: File) -> Self {
        RedactingLog {
            file: Some(file),
            pending: Vec::new(),
        }
    }

    /// Create the private file at `path` and write through to it.
    pub fn create(path: &Path) -> io::Result<Self> {
        create_private(path).map(Self::new)
    }

    /// Take `chunk` of output: the complete lines so far are redacted and written.
    pub fn write(&mut self, chunk: &[u8]) -> io::Result<()> {
        self.pending.extend_from_slice(chunk);
        let Some(end) = self
            .pending
            .iter()
            .rposition(|&b| b == b'\n' || b == b'\r')
            .map(|i| i + 1)
        else {
            if self.pending.len() > MAX_PENDING {
                return self.flush_piece();
            }
            return Ok(());
        };
        if self.key_open(end) && self.pending.len() < MAX_HELD_KEY {
            return Ok(());
        }
        self.emit(end)
    }

    /// Write what is left (an unfinished last line) and flush.
    pub fn finish(&mut self) -> io::Result<()> {
        let end = self.pending.len();
        if end > 0 {
            self.emit(end)?;
        }
        match self.file.as_mut() {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }

    /// A private key block starts in the first `end` bytes and does not end there.
    fn key_open(&self, end: usize) -> bool {
        KEY_ARMOUR
            .captures_iter(&self.pending[..end])
            .last()
            .is_some_and(|c| &c[1] == b"BEGIN")
    }

    /// Redact and write a piece of a very long line, ending on a character boundary.
    fn flush_piece(&mut self) -> io::Result<()> {
        let mut end = self.pending.len();
        if let Err(e) = std::str::from_utf8(&self.pending) {
            // Up to the last complete character (an invalid byte earlier is written lossily).
            if e.error_len().is_none() {
                end = e.valid_up_to().max(1);
            }
        }
        self.emit(end)
    }

    fn emit(&mut self, end: usize) -> io::Result<()> {
        let rest = self.pending.split_off(end);
        let head = std::mem::replace(&mut self.pending, rest);
        let text = match String::from_utf8(head) {
            Ok(text) => text,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        let Some(file) = self.file.as_mut() else {
            return Ok(());
        };
        if let Err(err) = file.write_all(redact_owned(text).as_bytes()) {
            // One failure ends the log: a later write would leave a hole in it.
            self.file = None;
            return Err(err);
        }
        Ok(())
    }
}

impl Drop for RedactingLog {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn logs_are_private_and_redacted_even_when_a_secret_spans_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("ws/logs");
        private_dir(&logs).unwrap();
        assert_eq!(mode(&logs), 0o700);
        let path = logs.join("sheet-01.stdout.log");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut log = RedactingLog::create(&path).unwrap();
        assert_eq!(mode(&path), 0o600, "an existing 0644 file is restricted");
        for chunk in [
            "start\nANTHROPIC_API_KEY=sk-an".as_bytes(),
            b"t-short1 and MY_TOKEN=hun",
            b"ter2hunter2\nkey:\n-----BEGIN RSA PRIVATE KEY-----\nMIIE",
            b"pAIBAAK\n-----END RSA PRIVATE KEY-----\nunfinished sk-proj-abc1",
        ] {
            log.write(chunk).unwrap();
        }
        drop(log);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "start\nANTHROPIC_API_KEY=[REDACTED_ANTHROPIC_KEY] and MY_TOKEN=[REDACTED]\nkey:\n\
             [REDACTED_PRIVATE_KEY]\nunfinished [REDACTED_OPENAI_KEY]"
        );
    }

    #[test]
    fn existing_directories_are_restricted_and_copies_redacted() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&logs).unwrap();
        assert_eq!(mode(&logs), 0o700);
        let src = dir.path().join("remote.out");
        std::fs::write(&src, "token=abc123\n").unwrap();
        let dst = logs.join("sheet-02.stdout.log");
        copy_redacted(&src, &dst).unwrap();
        assert_eq!(std::fs::read_to_string(&dst).unwrap(), "token=[REDACTED]\n");
        assert_eq!(mode(&dst), 0o600);
        write_redacted(&dst, "password: hunter2").unwrap();
        assert_eq!(
            std::fs::read_to_string(&dst).unwrap(),
            "password: [REDACTED]"
        );
    }

    #[test]
    fn long_lines_are_written_in_pieces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        let mut log = RedactingLog::create(&path).unwrap();
        let line = "é".repeat(MAX_PENDING);
        log.write(line.as_bytes()).unwrap();
        assert!(
            std::fs::metadata(&path).unwrap().len() > 0,
            "a long line is not held whole"
        );
        log.finish().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), line);
    }
}
