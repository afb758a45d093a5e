//! Watching a limits file: each new text read, checked, and applied or
//! refused.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{ConfigError, Limits, LimitsFile};

/// How often a watched file is read: a change runs within this (and the
/// time to read and build it), well inside 2 s.
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
    /// Read the file at `path` every half second from now on, on the tokio
    /// runtime; each time its text changes, run it if it is valid, and keep
    /// the running version if not. `on_reload` hears of each (and with the
    /// `tracing` feature, so does the log). The task ends when the handle
    /// is aborted.
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

/// A task reading `path` every [`WATCH_EVERY`] and giving `changed` each
/// new text, read and built like `running` (or why not), starting from the
/// text of `running`.
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
        let mut last_error: Option<String> = None;
        loop {
            tokio::time::sleep(WATCH_EVERY).await;
            let read = {
                let path = path.clone();
                tokio::task::spawn_blocking(move || std::fs::read_to_string(&path)).await
            };
            let text = match read {
                Ok(Ok(text)) => text,
                Ok(Err(e)) => {
                    // Told once, not every half second: an editor may
                    // replace the file by moving a new one in.
                    let error = ConfigError::unreadable(&path, &e);
                    if last_error.as_deref() != Some(error.message()) {
                        last_error = Some(error.message().to_owned());
                        changed(&path, Err(error)).await;
                    }
                    continue;
                }
                Err(_) => continue,
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
