//! The one-shot commands of the `compactd` binary. `compact` and `navigate` append to the
//! session file (nothing when cancelled or previewed).

pub mod common;
pub mod compact;
pub mod navigate;
