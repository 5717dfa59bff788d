//! Opening files that a client, a session header or the user names, without letting one of them
//! hang or kill the process.
//!
//! * Only regular files are opened. A FIFO named like a session or settings file would block
//!   `open` until some other process opens its other end (forever, usually), a character
//!   device could be read without end, and a directory cannot be read at all; each is refused
//!   with [`NotRegularFile`] before anything reads from it. The check is a `stat` before the
//!   open, so a FIFO is never opened, and an `fstat` of what was opened (with `O_NONBLOCK`, so
//!   a FIFO swapped in between the two cannot block either), so the file used is the file
//!   checked.
//! * A write past the process's file-size limit (`ulimit -f`) is an error, not a death:
//!   [`ignore_file_size_signal`] sets `SIGXFSZ` to be ignored, so `write` fails with `EFBIG`
//!   and the caller answers with an error and cleans up.
//!
//! Used by every layer that reads or writes a named path (sessions, listings, settings,
//! prompt overrides, the blob store).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::path::Path;

/// The path names something other than a regular file (a FIFO, a directory, a device, a
/// socket). Carried inside an [`io::Error`] of kind [`io::ErrorKind::InvalidInput`]; see
/// [`not_regular`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("is a {kind}, not a regular file")]
pub struct NotRegularFile {
    /// What it is instead: `FIFO`, `directory`, `socket`, `character device`, `block device`.
    pub kind: &'static str,
}

/// The [`NotRegularFile`] inside `error`, if that is what it is.
pub fn not_regular(error: &io::Error) -> Option<&NotRegularFile> {
    error.get_ref()?.downcast_ref::<NotRegularFile>()
}

/// What `meta` describes, when it is not a regular file.
fn irregular_kind(meta: &fs::Metadata) -> Option<&'static str> {
    let kind = meta.file_type();
    if kind.is_file() {
        return None;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return Some("FIFO");
        }
        if kind.is_socket() {
            return Some("socket");
        }
        if kind.is_char_device() {
            return Some("character device");
        }
        if kind.is_block_device() {
            return Some("block device");
        }
    }
    if kind.is_dir() {
        return Some("directory");
    }
    Some("special file")
}

fn check_regular(meta: &fs::Metadata) -> io::Result<()> {
    match irregular_kind(meta) {
        None => Ok(()),
        Some(kind) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            NotRegularFile { kind },
        )),
    }
}

/// Opens `path` with `options` if it is a regular file (following symlinks), never blocking
/// on a FIFO; `Err` with a [`NotRegularFile`] inside otherwise. With `create`, a missing file
/// is created as usual.
pub fn open_regular(path: &Path, options: &mut OpenOptions) -> io::Result<File> {
    match fs::metadata(path) {
        Ok(meta) => check_regular(&meta)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // On a regular file O_NONBLOCK changes nothing; it only keeps a FIFO that replaced the
        // file since the stat above from blocking this open.
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    check_regular(&file.metadata()?)?;
    Ok(file)
}

/// Reads a regular file whole; see [`open_regular`].
pub fn read_regular(path: &Path) -> io::Result<Vec<u8>> {
    let mut file = open_regular(path, OpenOptions::new().read(true))?;
    let mut data = Vec::new();
    file.read_to_end(&mut data)?;
    Ok(data)
}

/// Reads a regular file whole without following a symlink at `path` itself: a link (even
/// to a regular file) is refused with a [`NotRegularFile`] of kind `symbolic link`, as is
/// anything else that is not a regular file. For stores whose files only compactd writes (the
/// blob store), where a link can only have been planted.
pub fn read_regular_nofollow(path: &Path) -> io::Result<Vec<u8>> {
    let symlink = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            NotRegularFile {
                kind: "symbolic link",
            },
        )
    };
    let meta = fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        return Err(symlink());
    }
    check_regular(&meta)?;
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // O_NOFOLLOW: a link swapped in since the lstat above fails the open (ELOOP) rather
        // than being followed; O_NONBLOCK: a FIFO swapped in cannot block it.
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let mut file = match options.open(path) {
        Ok(file) => file,
        #[cfg(unix)]
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(symlink()),
        Err(e) => return Err(e),
    };
    check_regular(&file.metadata()?)?;
    let mut data = Vec::new();
    file.read_to_end(&mut data)?;
    Ok(data)
}

/// Reads a regular file whole as UTF-8; see [`open_regular`].
pub fn read_regular_to_string(path: &Path) -> io::Result<String> {
    String::from_utf8(read_regular(path)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Makes a write past the file-size limit (`RLIMIT_FSIZE`) fail with `EFBIG` instead of
/// killing the process with `SIGXFSZ`. Called once at the start of `main`.
pub fn ignore_file_size_signal() {
    #[cfg(unix)]
    // SAFETY: `signal` with `SIG_IGN` installs no handler code; it only sets the disposition
    // of one signal, which is sound at any time in any thread.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// Makes glibc's allocator give large buffers back to the system when they are freed. By
/// default glibc serves a freed large buffer's size from its heaps afterwards (its mmap
/// threshold rises to 32 MB with each large free) and keeps up to eight heaps per core, so a
/// daemon that builds and sends many 40 MB answers in turn keeps the memory of several of them
/// after each was freed: 60 `session/context` answers of a 40 MB session, read in turn, took
/// the peak from 290 MB to over 650 MB. Buffers of 1 MiB or more are then mapped on their own
/// and unmapped when freed, and two heaps serve every thread. Called once at the start of
/// `main`, before any thread starts (the tunables `MALLOC_MMAP_THRESHOLD_` and
/// `MALLOC_ARENA_MAX` in the environment win).
pub fn return_large_buffers_to_the_system() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let set = |name: &str| std::env::var_os(name).is_some();
        // SAFETY: `mallopt` only changes allocator parameters; it is called before any other
        // thread exists.
        unsafe {
            if !set("MALLOC_MMAP_THRESHOLD_") {
                libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
            }
            if !set("MALLOC_ARENA_MAX") {
                libc::mallopt(libc::M_ARENA_MAX, 2);
            }
        }
    }
}

/// The symbolic name of an errno value a file operation can fail with (`EFBIG`, `ENOSPC`,
/// `EACCES`, ...); `None` for the rare others, which keep only their number.
pub fn errno_name(errno: i32) -> Option<&'static str> {
    #[cfg(unix)]
    {
        let name = match errno {
            libc::EPERM => "EPERM",
            libc::ENOENT => "ENOENT",
            libc::EIO => "EIO",
            libc::EBADF => "EBADF",
            libc::EAGAIN => "EAGAIN",
            libc::ENOMEM => "ENOMEM",
            libc::EACCES => "EACCES",
            libc::EBUSY => "EBUSY",
            libc::EEXIST => "EEXIST",
            libc::EXDEV => "EXDEV",
            libc::ENOTDIR => "ENOTDIR",
            libc::EISDIR => "EISDIR",
            libc::EINVAL => "EINVAL",
            libc::ENFILE => "ENFILE",
            libc::EMFILE => "EMFILE",
            libc::ETXTBSY => "ETXTBSY",
            libc::EFBIG => "EFBIG",
            libc::ENOSPC => "ENOSPC",
            libc::ESPIPE => "ESPIPE",
            libc::EROFS => "EROFS",
            libc::EMLINK => "EMLINK",
            libc::ENAMETOOLONG => "ENAMETOOLONG",
            libc::ELOOP => "ELOOP",
            libc::EDQUOT => "EDQUOT",
            libc::ESTALE => "ESTALE",
            _ => return None,
        };
        Some(name)
    }
    #[cfg(not(unix))]
    {
        let _ = errno;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifos_directories_and_devices_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("x.jsonl");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo runs");
        assert!(status.success());
        for (path, kind) in [
            (fifo.as_path(), "FIFO"),
            (dir.path(), "directory"),
            (Path::new("/dev/null"), "character device"),
        ] {
            for result in [
                read_regular(path).map(drop),
                open_regular(path, OpenOptions::new().write(true)).map(drop),
            ] {
                let error = result.expect_err("refused");
                assert_eq!(
                    not_regular(&error),
                    Some(&NotRegularFile { kind }),
                    "{path:?}"
                );
            }
        }
        let file = dir.path().join("f");
        fs::write(&file, "text").unwrap();
        assert_eq!(read_regular_to_string(&file).unwrap(), "text");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_regular(&link).unwrap(), b"text");
    }
}
