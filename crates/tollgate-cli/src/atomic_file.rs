//! An output file that appears complete or not at all.
//!
//! Written under a temporary name in the target's own directory (so the final
//! rename stays on one file system and is atomic), renamed over the target on
//! [`AtomicFile::commit`], and removed if dropped uncommitted — by an error
//! path, an early return or a panic.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// How many temporary names to try before giving up (names taken by files
/// left over from a killed run with the same process id).
const NAME_ATTEMPTS: u32 = 100;

/// A file being written under a temporary name; see the module docs.
#[derive(Debug)]
pub struct AtomicFile {
    file: File,
    temp: PathBuf,
    target: PathBuf,
    committed: bool,
}

impl AtomicFile {
    /// Starts writing what will become `target`. `target` itself is not
    /// touched until [`commit`](Self::commit).
    pub fn create(target: &Path) -> io::Result<Self> {
        let name = target.file_name().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("`{}` does not name a file", target.display()),
            )
        })?;
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
            match OpenOptions::new().write(true).create_new(true).open(&temp) {
                Ok(file) => {
                    return Ok(AtomicFile {
                        file,
                        temp,
                        target: target.to_path_buf(),
                        committed: false,
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < NAME_ATTEMPTS => {
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Moves the finished file to its target name, replacing any file there.
    pub fn commit(mut self) -> io::Result<()> {
        self.file.flush()?;
        fs::rename(&self.temp, &self.target)?;
        self.committed = true;
        Ok(())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.committed {
            // Best effort: the error that got us here matters more.
            let _ = fs::remove_file(&self.temp);
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
        let mut file = AtomicFile::create(&target).unwrap();
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
        let mut file = AtomicFile::create(&target).unwrap();
        file.write_all(b"partial").unwrap();
        drop(file);
        assert!(entries(dir.path()).is_empty());
    }

    #[test]
    fn a_taken_temporary_name_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.csv");
        let first = AtomicFile::create(&target).unwrap();
        let second = AtomicFile::create(&target).unwrap();
        assert_ne!(first.temp, second.temp);
        second.commit().unwrap();
        drop(first);
        assert_eq!(entries(dir.path()), ["out.csv"]);
    }

    #[test]
    fn a_path_without_a_file_name_is_refused() {
        let err = AtomicFile::create(Path::new("/")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
}
