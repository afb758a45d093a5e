//! What is wrong with a limits file, and where.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// A limits file that cannot be used: where the mistake is (the file, its
/// line and column) and what was expected there.
///
/// ```
/// # #[cfg(feature = "config")] {
/// use tower_ratelimit::config::LimitsFile;
///
/// let err = LimitsFile::parse("[[routes]]\npath = \"/a\"\nlimits = \"10/fortnight\"\n").unwrap_err();
/// assert_eq!((err.line(), err.column()), (Some(3), Some(10)));
/// assert!(err.to_string().contains("unknown time unit \"fortnight\""), "{err}");
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct ConfigError {
    file: Option<Arc<Path>>,
    at: Option<(usize, usize)>,
    message: String,
}

impl ConfigError {
    /// An error at byte `span_start` of `text` (its line and column found
    /// here), or of the whole file when `None`.
    pub(super) fn at(text: &str, span_start: Option<usize>, message: impl Into<String>) -> Self {
        Self {
            file: None,
            at: span_start.map(|offset| line_and_column(text, offset)),
            message: message.into(),
        }
    }

    /// A file that could not be read.
    pub(super) fn unreadable(path: &Path, error: &std::io::Error) -> Self {
        Self {
            file: Some(path.into()),
            at: None,
            message: format!("cannot read it: {error}"),
        }
    }

    /// An error without a place: a file that lacks what your application
    /// needs of it, say, or a change that names nothing in it.
    pub fn from_message(message: impl Into<String>) -> Self {
        Self {
            file: None,
            at: None,
            message: message.into(),
        }
    }

    pub(super) fn in_file(mut self, path: &Path) -> Self {
        self.file = Some(path.into());
        self
    }

    /// The file, when the error came from one.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// The line (from 1) of the mistake, when it has a place.
    pub fn line(&self) -> Option<usize> {
        self.at.map(|(line, _)| line)
    }

    /// The column (from 1, in characters) of the mistake, when it has a place.
    pub fn column(&self) -> Option<usize> {
        self.at.map(|(_, column)| column)
    }

    /// What is wrong, without the place.
    pub fn message(&self) -> &str {
        &self.message
    }
}

fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}: ", file.display())?;
        }
        if let Some((line, column)) = self.at {
            write!(f, "line {line}, column {column}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}
