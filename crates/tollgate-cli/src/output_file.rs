//! Where `--output` writes: a regular file replaced in one step, anything
//! else written in place.
//!
//! - A regular file (or a name not yet taken) is written under a temporary
//!   name in its own directory (so the final rename stays on one file system
//!   and is atomic) and renamed over the target on [`OutputFile::commit`]:
//!   readers see the old file or the complete new one. An existing file's
//!   permission bits (and, where allowed, its owner) carry over. The
//!   temporary file is removed if the output is dropped uncommitted (an
//!   error, an early return, a panic) and on SIGINT, SIGTERM or SIGHUP
//!   ([`crate::temp_cleanup`]).
//! - A symbolic link is followed, and its final target treated as above; the
//!   link itself is kept.
//! - A FIFO or a device (`/dev/null`, `/dev/stdout`, a terminal) is opened
//!   and written directly, as a shell's `>` would: it cannot be replaced
//!   without breaking whoever uses it. Such an output is not all-or-nothing.
//! - A directory or a socket is refused.
//!
//! ```no_run
//! use std::io::Write;
//! use tollgate_cli::output_file::OutputFile;
//!
//! let mut out = OutputFile::create("decisions.csv".as_ref())?;
//! out.write_all(b"t_ns,key,cost,allowed,remaining,retry_after_ns,delay_ns\n")?;
//! out.commit()?; // only now does decisions.csv change
//! # Ok::<(), std::io::Error>(())
//! ```

use std::ffi::OsString;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::temp_cleanup;

/// How many temporary names to try before giving up (names taken by files
/// left over from a run with the same process id killed by SIGKILL).
const NAME_ATTEMPTS: u32 = 100;

/// How many symbolic links to follow before calling it a loop (Linux's own
/// limit).
const MAX_LINKS: usize = 40;

/// An output being written; see the module docs.
#[derive(Debug)]
pub struct OutputFile {
    file: File,
    /// Set while a temporary file awaits its rename.
    replace: Option<Replace>,
}

/// A temporary file and the regular file it will replace.
#[derive(Debug)]
struct Replace {
    temp: PathBuf,
    target: PathBuf,
}

impl OutputFile {
    /// Starts writing what will become `path`. A regular file at `path` (or
    /// at the end of its links) is not touched until
    /// [`commit`](Self::commit); a FIFO or device is opened for writing now.
    pub fn create(path: &Path) -> io::Result<Self> {
        // The kernel follows the links here, /proc's magic ones included.
        match fs::metadata(path) {
            Ok(meta) if meta.is_file() => Self::replacing(fs::canonicalize(path)?, Some(&meta)),
            Ok(meta) if meta.is_dir() => Err(refused("it is a directory")),
            Ok(meta) if meta.file_type().is_socket() => Err(refused("it is a socket")),
            Ok(_) => Ok(OutputFile {
                file: OpenOptions::new().write(true).open(path)?,
                replace: None,
            }),
            // A new file, or the missing target of a link.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Self::replacing(follow_links(path)?, None)
            }
            Err(e) => Err(e),
        }
    }

    /// A temporary file beside `target`, with the permissions of `existing`.
    fn replacing(target: PathBuf, existing: Option<&Metadata>) -> io::Result<Self> {
        let name = target
            .file_name()
            .ok_or_else(|| refused("it does not name a file"))?;
        let dir = match target.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let mut attempt = 0;
        loop {
            let mut temp_name = OsString::from(".");
            temp_name.push(name);
            temp_name.push(format!(".{}-{attempt}.tmp", std::process::id()));
            let temp = dir.join(temp_name);
            let open = || OpenOptions::new().write(true).create_new(true).open(&temp);
            match temp_cleanup::register(&temp, open) {
                Ok(file) => {
                    let output = OutputFile {
                        file,
                        replace: Some(Replace { temp, target }),
                    };
                    if let Some(meta) = existing {
                        output.take_over(meta)?;
                    }
                    return Ok(output);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < NAME_ATTEMPTS => {
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Gives the temporary file the owner and permission bits of the file
    /// it replaces. The owner only changes where we may change it (as
    /// root); the mode is set after it, since a change of owner clears the
    /// set-id bits.
    fn take_over(&self, meta: &Metadata) -> io::Result<()> {
        let _ = std::os::unix::fs::fchown(&self.file, Some(meta.uid()), Some(meta.gid()));
        self.file
            .set_permissions(fs::Permissions::from_mode(meta.mode() & 0o7777))
    }

    /// Finishes the output: renames the temporary file over its target, or
    /// flushes a FIFO or device.
    pub fn commit(mut self) -> io::Result<()> {
        self.file.flush()?;
        if let Some(Replace { temp, target }) = &self.replace {
            temp_cleanup::unregister(temp, || fs::rename(temp, target))?;
            self.replace = None;
        }
        Ok(())
    }
}

/// `path` with the symbolic links on its last component followed, for a
/// link whose target does not exist yet: the file is created there and the
/// link kept.
fn follow_links(path: &Path) -> io::Result<PathBuf> {
    let mut path = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                // A relative link is relative to the link's directory;
                // joining an absolute one replaces the path.
                let link = fs::read_link(&path)?;
                path = match path.parent() {
                    Some(dir) => dir.join(link),
                    None => link,
                };
            }
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => return Ok(path),
        }
    }
    Err(io::Error::from_raw_os_error(libc::ELOOP))
}

/// Why an output cannot be written; the caller names the path.
fn refused(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why)
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if let Some(Replace { temp, .. }) = self.replace.take() {
            // Best effort: the error that got us here matters more.
            let _ = temp_cleanup::unregister(&temp, || fs::remove_file(&temp));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(dir: &Path) -> Vec<OsString> {
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn commit_replaces_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.csv");
        fs::write(&target, "old").unwrap();
        let mut file = OutputFile::create(&target).unwrap();
        file.write_all(b"new").unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "old");
        file.commit().unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "new");
        assert_eq!(entries(dir.path()), ["out.csv"]);
    }

    #[test]
    fn dropping_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.csv");
        let mut file = OutputFile::create(&target).unwrap();
        file.write_all(b"partial").unwrap();
        drop(file);
        assert!(entries(dir.path()).is_empty());
    }

    #[test]
    fn a_taken_temporary_name_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.csv");
        let first = OutputFile::create(&target).unwrap();
        let second = OutputFile::create(&target).unwrap();
        assert_ne!(
            first.replace.as_ref().unwrap().temp,
            second.replace.as_ref().unwrap().temp
        );
        second.commit().unwrap();
        drop(first);
        assert_eq!(entries(dir.path()), ["out.csv"]);
    }

    #[test]
    fn paths_that_are_not_files_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let err = OutputFile::create(dir.path()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(err.to_string(), "it is a directory");
        let err = OutputFile::create(Path::new("/")).unwrap_err();
        assert_eq!(err.to_string(), "it is a directory");

        let ring = dir.path().join("ring");
        std::os::unix::fs::symlink("ring", &ring).unwrap();
        let err = OutputFile::create(&ring).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(40), "{err}"); // ELOOP
    }
}
