//! Watching a limits file: each new text read, checked, and applied or
//! refused.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{ConfigError, Limits, LimitsFile};

/// How often a watched file's metadata is looked at: a change runs within
/// two of these (it must hold still for one), and the time to read and
/// build it: within about a second.
pub(super) const WATCH_EVERY: Duration = Duration::from_millis(500);

/// What became of a watched file's new text.
#[derive(Debug)]
#[non_exhaustive]
pub enum Reload<'a> {
    /// It runs now.
    Applied(&'a LimitsFile),
    /// It was refused (unreadable or invalid); the version before it keeps
    /// running.
    Refused(&'a ConfigError),
}

impl Limits {
    /// Watch the file at `path` from now on, on the tokio runtime: each time
    /// its text changes, run it if it is valid, and keep the running
    /// version if not. `on_reload` hears of each (and with the `tracing`
    /// feature, so does the log). The task ends when the handle is aborted.
    ///
    /// A new version is checked as the first was: with the same
    /// [`FileDefaults`](super::FileDefaults), so a route it
    /// [requires](super::FileDefaults::require_route) missing, or an empty
    /// file, is refused. The file's metadata is looked at every half
    /// second; it is read only when its size, modification time or inode
    /// changed and then held still for one more look (so an edit runs
    /// within about a second, and a file being written is not read
    /// half-way), and only if it is a regular file (symlinks followed) of
    /// at most [`LimitsFile::MAX_BYTES`]. To replace a file in one step,
    /// write the new one beside it and rename it into place.
    ///
    /// Must be called within a tokio runtime.
    pub fn watch(
        &self,
        path: impl Into<PathBuf>,
        on_reload: impl Fn(Reload<'_>) + Send + Sync + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let limits = self.clone();
        let current = self.current();
        watch_file(
            path.into(),
            LimitsFile::clone(&current),
            move |path, read| {
                if let Ok(file) = &read {
                    limits.apply(file.clone());
                }
                told(path, read.as_ref(), &on_reload);
                std::future::ready(())
            },
        )
    }
}

/// What says a file changed without reading it: its size, its modification
/// time and which file it is (a rename into place, a Kubernetes symlink
/// swap, gives another inode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
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
    fn settled(&self) -> bool {
        self.modified
            .and_then(|m| m.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(2))
    }
}

/// The stamp of the regular file `path` leads to, or why it is no limits
/// file (missing, a device, a FIFO, a folder, larger than
/// [`LimitsFile::MAX_BYTES`]). Reads the metadata only: a FIFO is never
/// opened, `/dev/zero` never read.
fn stamp(path: &Path) -> Result<Stamp, ConfigError> {
    let meta = std::fs::metadata(path).map_err(|e| ConfigError::unreadable(path, &e))?;
    if !meta.is_file() {
        return Err(ConfigError::from_message(
            "not a regular file (a folder, a device or a FIFO): a limits file must be one",
        )
        .in_file(path));
    }
    if meta.len() > LimitsFile::MAX_BYTES {
        return Err(ConfigError::from_message(format!(
            "{} bytes: a limits file may have at most {} (1 MiB)",
            meta.len(),
            LimitsFile::MAX_BYTES
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
/// [`LimitsFile::MAX_BYTES`], read no further than that even if it grows
/// meanwhile.
pub(super) fn read_text(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    stamp(path)?;
    let file = std::fs::File::open(path).map_err(|e| ConfigError::unreadable(path, &e))?;
    let mut bytes = Vec::new();
    file.take(LimitsFile::MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ConfigError::unreadable(path, &e))?;
    if bytes.len() as u64 > LimitsFile::MAX_BYTES {
        return Err(ConfigError::from_message(format!(
            "it grew past {} bytes (1 MiB) while it was read",
            LimitsFile::MAX_BYTES
        ))
        .in_file(path));
    }
    String::from_utf8(bytes)
        .map_err(|_| ConfigError::from_message("it is not UTF-8 text").in_file(path))
}

/// A task looking at `path`'s metadata every [`WATCH_EVERY`] and giving
/// `changed` each new text, read and built like `running` (or why not),
/// starting from the text of `running`.
///
/// The file is read only when its size, modification time or inode change,
/// and only once they have stayed the same for one more look: a file being
/// written is not read half-way (an editor or deploy that pauses longer
/// mid-write should write elsewhere and rename the file into place).
pub(super) fn watch_file<F, Fut>(
    path: PathBuf,
    running: LimitsFile,
    mut changed: F,
) -> tokio::task::JoinHandle<()>
where
    F: FnMut(&Path, Result<LimitsFile, ConfigError>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let mut seen = running.text().to_owned();
    tokio::spawn(async move {
        let look = |path: &PathBuf| {
            let path = path.clone();
            tokio::task::spawn_blocking(move || stamp(&path))
        };
        // What the running version was read from: not read again.
        let mut read_at = look(&path).await.ok().and_then(Result::ok);
        let mut changing: Option<Stamp> = None;
        let mut last_error: Option<String> = None;
        loop {
            tokio::time::sleep(WATCH_EVERY).await;
            let Ok(now) = look(&path).await else { continue };
            let read = match now {
                Ok(now) if Some(now) == read_at && now.settled() => continue,
                // Changed since the last look: read once it holds still.
                Ok(now) if Some(now) != read_at && changing != Some(now) => {
                    changing = Some(now);
                    continue;
                }
                Ok(now) => {
                    read_at = Some(now);
                    let path = path.clone();
                    match tokio::task::spawn_blocking(move || read_text(&path)).await {
                        Ok(read) => read,
                        Err(_) => continue,
                    }
                }
                Err(error) => Err(error),
            };
            changing = None;
            let text = match read {
                Ok(text) => text,
                Err(error) => {
                    // Told once, not every half second: an editor may
                    // replace the file by moving a new one in.
                    read_at = None;
                    if last_error.as_deref() != Some(error.message()) {
                        last_error = Some(error.message().to_owned());
                        changed(&path, Err(error)).await;
                    }
                    continue;
                }
            };
            if text == seen {
                continue;
            }
            last_error = None;
            let built = running.reparse(&text).map_err(|e| e.in_file(&path));
            seen = text;
            changed(&path, built).await;
        }
    })
}

/// A watched file's new version, applied or refused: logged (feature
/// `tracing`), and told to `on_reload`.
pub(super) fn told(
    path: &Path,
    read: Result<&LimitsFile, &ConfigError>,
    on_reload: &dyn Fn(Reload<'_>),
) {
    match read {
        Ok(file) => {
            #[cfg(feature = "tracing")]
            tracing::info!(version = file.version(), path = %path.display(), "limits: new version live");
            on_reload(Reload::Applied(file));
        }
        Err(error) => {
            log_refused(error);
            on_reload(Reload::Refused(error));
        }
    }
    #[cfg(not(feature = "tracing"))]
    let _ = path;
}

pub(super) fn log_refused(error: &ConfigError) {
    #[cfg(feature = "tracing")]
    tracing::warn!(%error, "limits: new version refused; the running one stays");
    #[cfg(not(feature = "tracing"))]
    let _ = error;
}
