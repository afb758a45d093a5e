//! The limits file on disk: what says it changed without reading it, and
//! its text, read within a bound whatever the path leads to.

use std::path::Path;
use std::time::Duration;

use super::ConfigError;

/// The largest limits file read: 1 MiB ([`LimitsFile::MAX_BYTES`](super::LimitsFile::MAX_BYTES)).
pub(super) const MAX_BYTES: u64 = 1 << 20;

/// What says a file changed without reading it: its size, its modification
/// time and which file it is (a rename into place, a Kubernetes symlink
/// swap, gives another inode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Stamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    #[cfg(unix)]
    file: (u64, u64),
}

impl Stamp {
    /// Whether a write could still leave the stamp as it is: file times
    /// move in steps of a few milliseconds, so a second write of the same
    /// length within one step keeps them. A stamp this recent is not
    /// trusted to say "unchanged" (the text is compared instead).
    pub(super) fn settled(&self) -> bool {
        self.modified
            .and_then(|m| m.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(2))
    }
}

/// The stamp of the regular file `path` leads to, or why it is no limits
/// file (missing, a device, a FIFO, a folder, larger than
/// [`MAX_BYTES`]). Reads the metadata only: a FIFO is never
/// opened, `/dev/zero` never read.
pub(super) fn stamp(path: &Path) -> Result<Stamp, ConfigError> {
    let meta = std::fs::metadata(path).map_err(|e| ConfigError::unreadable(path, &e))?;
    if !meta.is_file() {
        return Err(ConfigError::from_message(
            "not a regular file (a folder, a device or a FIFO): a limits file must be one",
        )
        .in_file(path));
    }
    if meta.len() > MAX_BYTES {
        return Err(ConfigError::from_message(format!(
            "{} bytes: a limits file may have at most {} (1 MiB)",
            meta.len(),
            MAX_BYTES
        ))
        .in_file(path));
    }
    Ok(Stamp {
        len: meta.len(),
        modified: meta.modified().ok(),
        #[cfg(unix)]
        file: {
            use std::os::unix::fs::MetadataExt;
            (meta.dev(), meta.ino())
        },
    })
}

/// The text of the limits file at `path`: a regular file of at most
/// [`MAX_BYTES`], read no further than that even if it grows
/// meanwhile.
pub(super) fn read_text(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    stamp(path)?;
    let file = std::fs::File::open(path).map_err(|e| ConfigError::unreadable(path, &e))?;
    let mut bytes = Vec::new();
    file.take(MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ConfigError::unreadable(path, &e))?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(ConfigError::from_message(format!(
            "it grew past {} bytes (1 MiB) while it was read",
            MAX_BYTES
        ))
        .in_file(path));
    }
    String::from_utf8(bytes)
        .map_err(|_| ConfigError::from_message("it is not UTF-8 text").in_file(path))
}
