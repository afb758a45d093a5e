//! Watching a limits file: each new text read, checked, and applied or
//! refused.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::disk::{read_text, stamp, Stamp};
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
