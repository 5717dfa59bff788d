//! How a command fails: the message for stderr and the exit status. Below every command and
//! below [`super::common`], which hands it on to them, so a helper of `common` (such as
//! [`super::guest`]) can fail the same way.

/// A failure to report on stderr; the message names the file (and line) concerned. `code` is
/// the exit status: [`EXIT_FAILURE`], or [`EXIT_NOTHING_TO_COMPACT`] for `compact` on a
/// session with nothing to compact (README, Command line).
#[derive(Debug)]
pub struct CliError {
    pub message: String,
    pub code: u8,
}

/// The exit status of a command that failed.
pub const EXIT_FAILURE: u8 = 1;
/// `compactd compact` on a session with nothing to compact (it ends with a compaction, or is
/// too small): nothing was written. Not a failure of the command, not a success either.
pub const EXIT_NOTHING_TO_COMPACT: u8 = 3;

impl CliError {
    pub fn new(message: impl Into<String>) -> Self {
        CliError {
            message: message.into(),
            code: EXIT_FAILURE,
        }
    }
}

impl<E: std::fmt::Display> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError::new(e.to_string())
    }
}
